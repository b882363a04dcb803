import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import type { Page } from "playwright-core";
import { expectJson, gatewayApi, type ApiClient } from "@pies/testkit";
import { launchBrowser, type Browser } from "./console/browser.js";
import {
  createInteraction,
  startEmbedded,
  startFourProcesses,
  type Target,
} from "./console/targets.js";

// The console's experiments (issue 28; DESIGN.md §13) in a real browser against the embedded mode
// and the four processes, as console.e2e.test.ts drives its pages: no fetch mocked, a test fails
// on any console error, page error or CSP violation, screenshots in test-results/console/.
//
// The runs: an interaction's version 1 answers "Describe: <text>"; its draft was edited since to
// answer "Describe briefly: <text>" except for texts that start with "same". The test provider's
// answer is seeded by the prompt, so replaying the runs against the draft changes the results of
// the "diff" runs (a new title, tags and score) and not those of the "same" runs.

// A browser, a pies and a machine shared with other test files: wide margins.
vi.setConfig({ testTimeout: 180_000, hookTimeout: 240_000 });

/** Runs replayed with the same result, and with another: more than a page of pairs (20). */
const SAME = 4;
const DIFF = 20;

/** An experiment's page (not the new-experiment form, whose address carries the search). */
const experimentPage = (url: URL) => /^\/experiments\/(?!new$)[^/]+$/.test(url.pathname);

describe.each([
  ["the embedded mode", startEmbedded],
  ["the four processes", startFourProcesses],
])("the console's experiments on %s", (_name, start) => {
  let target: Target;
  let browser: Browser;
  let api: ApiClient;
  const mark = randomBytes(4).toString("hex");
  const name = `Describe ${mark}`;
  const tag = `exp${mark}`;
  let experimentId = "";

  const json = <T = any>(response: Response, status = 200) =>
    expectJson<T>(response, status, () => target.output());

  beforeAll(async () => {
    target = await start();
    api = gatewayApi(target.url, target.adminKey);
    browser = await launchBrowser();
    const interaction = await createInteraction(target, {
      name,
      promptName: `describe-${mark}`,
      template: "return `Describe: ${text}`",
      field: "text",
      result: {
        type: "object",
        properties: {
          title: { type: "string" },
          tags: { type: "array", items: { type: "string" } },
          score: { type: "number" },
        },
        required: ["title", "tags", "score"],
      },
    });
    for (let i = 0; i < SAME + DIFF; i++) {
      const text = i < SAME ? `same ${i}` : `diff ${i}`;
      const run = await json(
        await api(`/interactions/${interaction.id}/execute`, {
          body: { data: { text }, tags: [tag] },
        }),
      );
      expect(run.status).toBe("completed");
    }
    await json(await api(`/interactions/${interaction.id}/publish`, { body: {} }), 201);
    await json(
      await api(`/prompts/${interaction.promptId}`, {
        method: "PUT",
        body: {
          content:
            'return text.startsWith("same") ? `Describe: ${text}` : `Describe briefly: ${text}`',
        },
      }),
    );
    // Runs reach the search in batches: the pages are opened once the API's search finds them.
    await vi.waitFor(
      async () => {
        const found = await json(
          await api("/runs/search", { body: { filters: { tags: [tag] }, onlyMeta: true } }),
        );
        expect(found.meta.count.total).toBe(SAME + DIFF);
      },
      { timeout: 60_000, interval: 250 },
    );
  });

  afterAll(async () => {
    await browser?.close();
    await target?.stop();
  });

  async function open(
    options: Parameters<Browser["page"]>[0] = {},
  ): Promise<{ page: Page; done: () => void }> {
    const before = browser.problems.length;
    const page = await browser.page(options);
    return { page, done: () => expect(browser.problems.slice(before)).toEqual([]) };
  }

  async function signIn(page: Page, path: string) {
    await page.goto(target.signInLink);
    await page.getByRole("heading", { name: "Runs", level: 1 }).waitFor();
    await page.goto(`${target.url}${path}`);
  }

  const slug = () => target.name.replace(/\W+/g, "-");

  /** The runs page's search, then its Experiment… form. */
  async function openForm(page: Page) {
    await signIn(page, `/runs?tags=${tag}`);
    await expect
      .poll(() => page.getByTestId("runs-total").textContent(), { timeout: 30_000 })
      .toBe(`${SAME + DIFF} runs`);
    await page.getByRole("link", { name: "Experiment…" }).click();
    await page.getByRole("heading", { name: "New experiment" }).waitFor();
    expect(new URL(page.url()).search).toBe(`?tags=${tag}`);
    await expect
      .poll(() => page.getByTestId("matching").textContent(), { timeout: 30_000 })
      .toMatch(new RegExp(`^${SAME + DIFF} runs match this search`));
    await expect(page.getByTestId("experiment-search").textContent()).resolves.toBe(`tags: ${tag}`);
  }

  async function fill(page: Page, label: string, value: string) {
    const field = page.getByRole("combobox", { name: label, exact: true });
    await field.fill(value);
    await page.keyboard.press("Escape");
  }

  it("starts an experiment from a runs search, then reads its comparison and highlighted differences", async () => {
    // The refusals below are a 400 and a 404 that the browser logs.
    const { page, done } = await open({ expectStatuses: [400, 404] });
    await openForm(page);
    await browser.screenshot(page, `${slug()}-experiment-new-1280`);

    // No name: the API's 400 is shown at the field.
    await fill(page, "Target interaction", "Nope@draft");
    await page.getByRole("button", { name: "Start the experiment" }).click();
    await page.getByText("String must contain at least 1 character(s)").waitFor();
    // A target that does not exist: its 404 is shown at the target.
    await page.getByRole("textbox", { name: "Name", exact: true }).fill(`briefly ${mark}`);
    await page.getByRole("button", { name: "Start the experiment" }).click();
    await page.getByText("interaction Nope@draft not found").waitFor();

    // The target is offered by name among the project's interactions.
    await page.getByRole("combobox", { name: "Target interaction", exact: true }).fill(mark);
    await page.getByRole("option", { name: `${name}@draft` }).click();
    await expect(
      page.getByRole("combobox", { name: "Target interaction", exact: true }).inputValue(),
    ).resolves.toBe(`${name}@draft`);
    await page.getByRole("button", { name: "Start the experiment" }).click();
    await page.waitForURL(experimentPage, { timeout: 30_000 });
    experimentId = new URL(page.url()).pathname.split("/").at(-1)!;
    await page.getByRole("heading", { name: `briefly ${mark}` }).waitFor();

    // It ends (the page follows it: no reload).
    await expect
      .poll(() => page.getByTestId("experiment-status").textContent(), { timeout: 90_000 })
      .toBe("completed");
    const experiment = await json(await api(`/experiments/${experimentId}?pairs_limit=1000`));
    expect(experiment).toMatchObject({
      status: "completed",
      source: { filters: { tags: [tag] }, limit: 100 },
      target: { interaction: `${name}@draft` },
      progress: { total: SAME + DIFF, done: SAME + DIFF, completed: SAME + DIFF },
    });
    expect(experiment.comparison.exact_match_rate).toBeCloseTo(SAME / (SAME + DIFF));
    await expect
      .poll(() => page.getByTestId("progress-text").textContent(), { timeout: 30_000 })
      .toMatch(new RegExp(`^${SAME + DIFF} of ${SAME + DIFF} pairs done`));

    // The comparison side by side, as the API counts it.
    const comparison = page.getByTestId("comparison");
    const cells = async (measure: string) =>
      (await comparison.locator(`tr[data-measure="${measure}"] td`).allTextContents()).map((t) =>
        t.trim(),
      );
    await expect.poll(() => cells("schema_valid")).toEqual(["100 %", "100 %", "same"]);
    await expect
      .poll(() => cells("exact_match"))
      .toEqual(["", "16.7 %", `≠ ${DIFF} of ${SAME + DIFF} differ`]);
    const tokens = await cells("tokens");
    expect(tokens.slice(0, 2)).toEqual([
      experiment.comparison.original.tokens.toLocaleString("en"),
      experiment.comparison.candidate.tokens.toLocaleString("en"),
    ]);

    // The first page of pairs: a difference highlighted on each side (the score always changes).
    const rows = page.getByTestId("pairs").locator("tbody tr[data-position]");
    await expect.poll(() => rows.count(), { timeout: 30_000 }).toBe(20);
    // Every pair shown has ended, as the header says the experiment has (none left as it was
    // when the page last read the pairs).
    const firstPage = page.getByTestId("pairs").getByTestId("pair-outcome");
    await expect
      .poll(async () => new Set(await firstPage.allTextContents()), { timeout: 30_000 })
      .toEqual(new Set(["differs"]));
    // Newest first: the "diff" runs (made last) on the first page, the "same" ones on the next.
    const changed = experiment.pairs.find((p: any) => !p.exact_match && p.position < 20);
    const row = page.locator(`tr[data-position="${changed.position}"]`);
    await expect(row.getByTestId("pair-outcome").textContent()).resolves.toBe("differs");
    await row
      .getByTestId("original-result")
      .locator('mark[data-diff="changed"]', { hasText: String(changed.original.result.score) })
      .waitFor();
    await row
      .getByTestId("candidate-result")
      .locator('mark[data-diff="changed"]', { hasText: String(changed.candidate.result.score) })
      .waitFor();
    await browser.screenshot(page, `${slug()}-experiment-1280`);

    // The two results in CodeMirror's merge view, loaded on demand.
    await row.getByRole("button", { name: "Compare as text" }).click();
    await page.locator(".cm-deletedChunk, .cm-changedLine").first().waitFor();

    // Paging: 24 pairs, 20 a page.
    await page.getByRole("button", { name: "Next pairs" }).click();
    await expect.poll(() => rows.count()).toBe(SAME + DIFF - 20);
    await expect(page.getByTestId("pairs-range").textContent()).resolves.toBe(
      `Pairs 21–${SAME + DIFF}`,
    );
    expect(new URL(page.url()).searchParams.get("page")).toBe("2");
    const same = experiment.pairs.find((p: any) => p.exact_match && p.position >= 20);
    const sameRow = page.locator(`tr[data-position="${same.position}"]`);
    await expect(sameRow.getByTestId("pair-outcome").textContent()).resolves.toBe("same");
    expect(await sameRow.locator("mark").count()).toBe(0);

    // Changed only: the 20 that differ, on one page.
    await page.getByText(`Changed only (${DIFF})`).click();
    await expect.poll(() => new URL(page.url()).searchParams.get("changed")).toBe("1");
    expect(new URL(page.url()).searchParams.get("page")).toBeNull();
    await expect.poll(() => rows.count()).toBe(DIFF);
    const outcomes = await page.getByTestId("pairs").getByTestId("pair-outcome").allTextContents();
    expect(new Set(outcomes)).toEqual(new Set(["differs"]));
    await expect(page.getByRole("button", { name: "Next pairs" }).count()).resolves.toBe(0);

    // A pair links to the run replayed and to its replay, whose parent it is.
    const first = page.locator("tr[data-position]").first();
    const position = Number(await first.getAttribute("data-position"));
    const pair = experiment.pairs.find((p: any) => p.position === position);
    await expect(first.getByTestId("source-run-link").getAttribute("href")).resolves.toBe(
      `/runs/${pair.source_run}`,
    );
    await first.getByTestId("run-link").click();
    await page.waitForURL(`${target.url}/runs/${pair.run}`);
    await expect
      .poll(() => page.getByTestId("parent-link").textContent(), { timeout: 30_000 })
      .toBe(pair.source_run);
    done();
  });

  it("cancels an experiment while it runs, its progress live", async () => {
    const { page, done } = await open();
    await openForm(page);
    await page.getByRole("textbox", { name: "Name", exact: true }).fill(`slow ${mark}`);
    await fill(page, "Target interaction", `${name}@1`);
    // 12 s a replay, at most 4 runs, 1 at a time: the cancel lands before the last starts.
    await fill(page, "Model", "test-latency-12000");
    await page.getByRole("textbox", { name: "Runs at most" }).fill("4");
    await page.getByRole("textbox", { name: "At once" }).fill("1");
    await page.getByRole("button", { name: "Start the experiment" }).click();
    await page.waitForURL(experimentPage, { timeout: 30_000 });
    const id = new URL(page.url()).pathname.split("/").at(-1)!;
    await page.getByRole("heading", { name: `slow ${mark}` }).waitFor();
    await expect(page.getByTestId("experiment-status").textContent()).resolves.toBe("running");
    await expect(page.getByTestId("live-state").textContent()).resolves.toBe("Live");
    // A pair runs (the stream says so: the page is not asked again).
    await expect
      .poll(() => page.getByTestId("progress-text").textContent(), { timeout: 30_000 })
      .toMatch(/· [1-4] running ·/);
    await browser.screenshot(page, `${slug()}-experiment-running-1280`);

    await page.getByRole("button", { name: "Cancel experiment" }).click();
    await page.getByTestId("cancelling").waitFor();
    await expect(page.getByRole("button", { name: "Cancelling…" }).isDisabled()).resolves.toBe(
      true,
    );
    // The pair under way ends (12 s), the rest are not replayed; the page follows.
    await expect
      .poll(() => page.getByTestId("experiment-status").textContent(), { timeout: 120_000 })
      .toBe("cancelled");
    const experiment = await json(await api(`/experiments/${id}`));
    expect(experiment).toMatchObject({
      status: "cancelled",
      cancel_requested: true,
      target: { interaction: `${name}@1`, config: { model: "test-latency-12000" } },
      concurrency: 1,
      source: { limit: 4 },
      progress: { total: 4, running: 0, pending: 0 },
    });
    // One at a time: the pairs not started when the cancel came are not replayed.
    const p = experiment.progress;
    expect(p.done + p.cancelled).toBe(4);
    expect(p.cancelled).toBeGreaterThan(0);
    await expect
      .poll(() => page.getByTestId("progress-text").textContent())
      .toMatch(new RegExp(`^${p.done} of 4 pairs done .* · ${p.cancelled} cancelled$`));
    await page.getByText("Not replayed (cancelled).").first().waitFor();
    await expect(page.getByRole("button", { name: /Cancel/ }).count()).resolves.toBe(0);
    await browser.screenshot(page, `${slug()}-experiment-cancelled-1280`);

    // The list: newest first, each with its status.
    await page
      .getByRole("navigation", { name: "Main" })
      .getByRole("link", { name: "Experiments" })
      .click();
    const list = page.getByTestId("experiments");
    await list.waitFor();
    const names = await list.locator("tbody tr td:first-child").allTextContents();
    expect(names.filter((n) => n.endsWith(mark))).toEqual([`slow ${mark}`, `briefly ${mark}`]);
    await expect(
      list.locator(`tr[data-experiment-id="${id}"]`).getByText("cancelled").count(),
    ).resolves.toBe(1);
    await expect(
      list
        .locator(`tr[data-experiment-id="${experimentId}"]`)
        .getByTestId("experiment-progress")
        .textContent(),
    ).resolves.toBe(`${SAME + DIFF} / ${SAME + DIFF} done`);
    await browser.screenshot(page, `${slug()}-experiments-1280`);
    done();
  });

  it("reads at 390 px wide, and says when there is no such experiment", async () => {
    const { page, done } = await open({ width: 390, height: 844, expectStatuses: [404] });
    await signIn(page, `/experiments/${experimentId}?changed=1`);
    await page.getByTestId("pairs").waitFor();
    const overflow = await page.evaluate(() => {
      const d = (globalThis as any).document.documentElement;
      return d.scrollWidth - d.clientWidth;
    });
    expect(overflow).toBeLessThanOrEqual(0);
    await browser.screenshot(page, `${slug()}-experiment-390`);
    await page.goto(`${target.url}/experiments/nope${mark}`);
    await page.getByText("No such experiment").waitFor();
    done();
  });
});
