import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Page } from "playwright-core";
import { expectJson, gatewayApi, type ApiClient } from "@pies/testkit";
import { launchBrowser, type Browser } from "./console/browser.js";
import { startEmbedded, startFourProcesses, type Target } from "./console/targets.js";

// The console's interactions, playground, versions, environments and API keys pages (DESIGN.md
// §12) in a real browser against the embedded mode and the four processes, as
// console.e2e.test.ts drives its pages: no fetch mocked, a test fails on any console error, page
// error or CSP violation (CodeMirror's styles included), screenshots in test-results/console/.

/** Replaces the text of the CodeMirror editor whose content carries `data-testid`. */
async function setEditor(page: Page, testId: string, text: string) {
  const editor = page.getByTestId(testId);
  await editor.click();
  await page.keyboard.press("ControlOrMeta+A");
  await page.keyboard.press("Delete");
  if (text) await page.keyboard.insertText(text);
}

const editorText = (page: Page, testId: string) =>
  page.getByTestId(testId).evaluate((el: any) => {
    // CodeMirror renders a line per .cm-line.
    return Array.from(el.querySelectorAll(".cm-line") as ArrayLike<any>)
      .map((line: any) => line.textContent)
      .join("\n");
  });

describe.each([
  ["the embedded mode", startEmbedded],
  ["the four processes", startFourProcesses],
])("the console's interaction pages on %s", (_name, start) => {
  let target: Target;
  let browser: Browser;
  let api: ApiClient;
  const mark = randomBytes(4).toString("hex");
  const name = `Story ${mark}`;
  let interactionId = "";

  const json = <T = any>(response: Response, status = 200) =>
    expectJson<T>(response, status, () => target.output());

  beforeAll(async () => {
    target = await start();
    api = gatewayApi(target.url, target.adminKey);
    browser = await launchBrowser();
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

  /** Signs in with `key` (the link's way) and opens `path`. */
  async function signIn(page: Page, path: string, key = target.adminKey) {
    await page.goto(`${target.url}/#key=${key}`);
    await page.getByRole("heading", { name: "Runs", level: 1 }).waitFor();
    await page.goto(`${target.url}${path}`);
  }

  const slug = () => target.name.replace(/\W+/g, "-");

  /**
   * A full-page screenshot once every editor was in view: CodeMirror measures only what is in
   * view, so an editor never scrolled to would show its line numbers at estimated heights.
   */
  async function shot(page: Page, name: string) {
    for (const editor of await page.locator(".cm-editor").all()) {
      await editor.scrollIntoViewIfNeeded();
    }
    await page.evaluate(() => (globalThis as any).scrollTo(0, 0));
    await page.waitForTimeout(200);
    await browser.screenshot(page, `${slug()}-${name}`);
  }

  it("creates an interaction with a prompt and a result schema, errors shown at their field", async () => {
    // The schema the API refuses is a 400 the browser logs.
    const { page, done } = await open({ expectStatuses: [400] });
    await signIn(page, "/interactions");
    await page.getByRole("heading", { name: "Interactions" }).waitFor();
    await page.getByRole("link", { name: "New interaction" }).click();
    await page.getByRole("heading", { name: "New interaction" }).waitFor();
    await page.getByRole("textbox", { name: "Name", exact: true }).fill(name);
    await setEditor(page, "prompt-0", "return `Write a short story about ${topic}`");
    await setEditor(
      page,
      "input-schema-0",
      '{"type": "object", "properties": {"topic": {"type": "string"}}, "required": ["topic"]}',
    );
    // Not JSON: refused before anything is sent, the message under the schema's editor.
    await setEditor(page, "result-schema", '{"type": "object", ');
    await page.getByRole("button", { name: "Create interaction" }).click();
    await expect(page.getByTestId("error-resultSchema").textContent()).resolves.toMatch(
      /Not valid JSON/,
    );
    await shot(page, "interaction-new-invalid");
    await setEditor(
      page,
      "result-schema",
      '{"type": "object", "properties": {"title": {"type": "string"}, "story": {"type": "string"}}, "required": ["title", "story"]}',
    );
    await setEditor(page, "test-data", `{"topic": "a lighthouse ${mark}"}`);
    await page.getByRole("combobox", { name: "Model" }).fill("test-slow");
    await page.keyboard.press("Escape");
    await page.getByRole("button", { name: "Create interaction" }).click();
    await page.waitForURL(/\/interactions\/(?!new$)[^/]+$/, { timeout: 30_000 });
    interactionId = page.url().split("/").pop()!;
    expect(interactionId).not.toBe("new");
    await page.getByRole("heading", { name }).waitFor();
    const saved = await json(await api(`/interactions/${interactionId}`));
    expect(saved.resultSchema.required).toEqual(["title", "story"]);
    expect(saved.model).toBe("test-slow");
    expect(saved.prompts[0].template.content).toBe("return `Write a short story about ${topic}`");
    expect(saved.prompts[0].template.inputSchema.required).toEqual(["topic"]);

    // A schema the API refuses: its message is shown at the schema.
    await setEditor(page, "result-schema", '{"type": "nonsense"}');
    await page.getByRole("button", { name: "Save draft" }).click();
    await expect(page.getByTestId("error-resultSchema").textContent()).resolves.toMatch(
      /not a valid JSON Schema/,
    );
    await shot(page, "interaction-schema-refused");
    await page.reload();
    await page.getByRole("heading", { name }).waitFor();
    await page.getByTestId("prompt-0").getByText("Write a short story").waitFor();
    // The keyboard is never trapped in an editor: Tab moves on to the next field.
    await page.getByTestId("input-schema-0").click();
    await page.keyboard.press("Tab");
    expect(
      await page.evaluate(
        () => (globalThis as any).document.activeElement?.closest(".cm-editor") === null,
      ),
    ).toBe(true);
    await shot(page, "interaction-1280");

    // The list finds it by a part of its name.
    await page.goto(`${target.url}/interactions?q=${mark}`);
    await page.getByRole("link", { name }).waitFor();
    expect(await page.getByTestId("interactions").getByRole("row").count()).toBe(2);
    await shot(page, "interactions-1280");
    done();
  });

  it("runs the draft in the playground: chunks as they come, then the final run", async () => {
    const { page, done } = await open();
    await signIn(page, `/interactions/${interactionId}/playground`);
    await page.getByRole("button", { name: "Run the draft" }).waitFor();
    await expect.poll(() => editorText(page, "playground-data")).toContain(`lighthouse ${mark}`);
    // Every text the output shows before the final run arrives (test-slow: 50 ms per chunk).
    await page.evaluate(() => {
      const w = globalThis as any;
      w.__seen = [];
      new w.MutationObserver(() => {
        const out = w.document.querySelector('[data-testid="stream-output"]');
        const final = w.document.querySelector('[data-testid="final-run"]');
        if (out && !final && out.textContent) w.__seen.push(out.textContent.length);
      }).observe(w.document.body, { subtree: true, childList: true, characterData: true });
    });
    await page.getByRole("button", { name: "Run the draft" }).click();
    await page.getByTestId("final-run").waitFor({ timeout: 45_000 });
    await expect(page.getByTestId("run-status").textContent()).resolves.toBe("completed");
    const seen: number[] = await page.evaluate(() => (globalThis as any).__seen);
    expect(new Set(seen).size).toBeGreaterThan(1);
    const streamed = await page.getByTestId("stream-output").textContent();
    const result = JSON.parse((await page.getByTestId("final-result").textContent())!);
    expect(Object.keys(result).sort()).toEqual(["story", "title"]);
    expect(JSON.parse(streamed!)).toEqual(result);
    const href = await page.getByTestId("run-link").getAttribute("href");
    expect(href).toMatch(/^\/runs\/[\w-]+$/);
    const run = await json(await api(`/runs/${href!.split("/").pop()}`));
    expect(run.status).toBe("completed");
    expect(run.result).toEqual(result);
    await shot(page, "playground-1280");

    // The prompts as an execution sends them, without a provider call.
    await page.getByRole("button", { name: "Render the prompts" }).click();
    await page
      .getByTestId("rendered")
      .getByText(`Write a short story about a lighthouse ${mark}`)
      .waitFor();
    await shot(page, "playground-rendered-1280");

    // Generated test data replaces the input (the test provider makes it locally).
    await setEditor(page, "playground-data", "{}");
    await page.getByRole("button", { name: "Generate test data" }).click();
    await expect
      .poll(() => editorText(page, "playground-data"), { timeout: 30_000 })
      .toMatch(/"topic"/);
    done();
  });

  it("publishes, edits the draft, publishes again and shows the difference", async () => {
    const { page, done } = await open();
    await signIn(page, `/interactions/${interactionId}/versions`);
    await page.getByLabel("Tags of the version").fill(`first${mark}`);
    await page.getByRole("button", { name: "Publish" }).click();
    await expect(page.getByTestId("published").textContent()).resolves.toMatch(/Version 1/);

    await page.getByRole("tab", { name: "Draft" }).click();
    await setEditor(page, "prompt-0", "return `Write a long poem about ${topic}`");
    await page.getByLabel("Temperature").fill("0.4");
    await page.getByRole("button", { name: "Save draft" }).click();
    await page.getByTestId("saved").waitFor();

    await page.getByRole("tab", { name: "Versions" }).click();
    await page.getByLabel("Tags of the version").fill(`second${mark}`);
    await page.getByRole("button", { name: "Publish" }).click();
    await expect(page.getByTestId("published").textContent()).resolves.toMatch(/Version 2/);
    await expect.poll(() => page.getByTestId("versions").getByRole("row").count()).toBe(3);

    // The list finds the versions by status and the tags they were published with.
    await page.goto(`${target.url}/interactions?status=published&tags=second${mark}`);
    await page.getByTestId("interactions").getByText("v2").waitFor();
    expect(await page.getByTestId("interactions").getByRole("row").count()).toBe(2);
    await page.getByRole("link", { name }).click();
    await page.waitForURL(`${target.url}/interactions/${interactionId}`);

    // Version 1 against version 2.
    await page.goto(`${target.url}/interactions/${interactionId}/versions?from=1&to=2`);
    const prompts = page.getByTestId("diff-prompts");
    await prompts.getByText("changed", { exact: true }).waitFor();
    await prompts
      .locator(".cm-deletedChunk")
      .getByText(/short story/)
      .waitFor();
    await prompts
      .locator(".cm-changedLine, .cm-insertedLine")
      .getByText(/long poem/)
      .first()
      .waitFor();
    await page.getByTestId("diff-settings").getByText("changed", { exact: true }).waitFor();
    await page.getByTestId("diff-schema").getByText("unchanged", { exact: true }).waitFor();
    await shot(page, "versions-diff-1280");
    // Version 2 against the draft: nothing changed since.
    await page.goto(`${target.url}/interactions/${interactionId}/versions?from=2&to=draft`);
    await page.getByText("No difference.").waitFor();
    const versions = await json(await api(`/interactions/${interactionId}/versions`));
    expect(versions.map((v: any) => [v.version, v.tags])).toEqual([
      [2, [`second${mark}`]],
      [1, [`first${mark}`]],
    ]);
    done();
  });

  it("reads at 390 px wide", async () => {
    const { page, done } = await open({ width: 390, height: 844 });
    await signIn(page, `/interactions/${interactionId}`);
    await page.getByRole("heading", { name }).waitFor();
    await page.getByTestId("prompt-0").waitFor();
    const overflow = await page.evaluate(() => {
      const d = (globalThis as any).document.documentElement;
      return d.scrollWidth - d.clientWidth;
    });
    expect(overflow).toBeLessThanOrEqual(0);
    await shot(page, "interaction-390");
    await page.getByRole("tab", { name: "Playground" }).click();
    await page.getByRole("button", { name: "Run the draft" }).click();
    await page.getByTestId("final-run").waitFor({ timeout: 45_000 });
    await shot(page, "playground-390");
    await page.goto(`${target.url}/interactions/${interactionId}/versions?from=1&to=2`);
    await page.getByTestId("diff-prompts").getByText("changed", { exact: true }).waitFor();
    await shot(page, "versions-diff-390");
    done();
  });

  it("creates and edits an environment; its provider key is never shown back", async () => {
    const secret = `prov-secret-${mark}-abcdef123456`;
    const { page, done } = await open();
    await signIn(page, "/environments");
    await page.getByRole("link", { name: "New environment" }).click();
    await page.getByRole("textbox", { name: "Name", exact: true }).fill(`env-${mark}`);
    await page.getByRole("combobox", { name: "Provider", exact: true }).click();
    await page.getByRole("option", { name: "test", exact: true }).click();
    await page.getByLabel("Default model").fill("test");
    await page.getByLabel("Enabled models").fill("test, test-slow");
    await page.getByLabel("Provider key").fill(secret);
    await page.getByRole("button", { name: "Create environment" }).click();
    await page.waitForURL(/\/environments\/(?!new)[^/]+$/, { timeout: 30_000 });
    await page.getByRole("heading", { name: `env-${mark}` }).waitFor();
    await page.getByTestId("models").getByText("test-slow").waitFor();
    expect(await page.getByLabel("Provider key").inputValue()).toBe("");
    expect(await page.content()).not.toContain(secret);
    await page.getByText(/A key is stored \(ends/).waitFor();
    await shot(page, "environment-1280");

    // An edit keeps the key (the field left empty) and still never shows it.
    await page.getByRole("textbox", { name: "Name", exact: true }).fill(`env-${mark}-renamed`);
    await page.getByRole("button", { name: "Save" }).click();
    await page.getByRole("heading", { name: `env-${mark}-renamed` }).waitFor();
    expect(await page.getByLabel("Provider key").inputValue()).toBe("");
    expect(await page.content()).not.toContain(secret);
    const id = page.url().split("/").pop();
    const environment = await json(await api(`/environments/${id}`));
    expect(environment.api_key_hint).toBeTruthy();
    expect(JSON.stringify(environment)).not.toContain(secret);

    await page.goto(`${target.url}/environments`);
    await page.getByRole("link", { name: `env-${mark}-renamed` }).waitFor();
    expect(await page.content()).not.toContain(secret);
    await shot(page, "environments-1280");
    done();
  });

  it("lets an admin create an API key, shown once, and revoke it", async () => {
    const { page, done } = await open({ expectStatuses: [401] });
    await signIn(page, "/api-keys");
    await page.getByRole("heading", { name: "API keys" }).waitFor();
    await page.getByLabel("Key name").fill(`ci-${mark}`);
    await page.getByRole("button", { name: "Create key" }).click();
    const secret = (await page.getByTestId("created-secret").textContent())!;
    expect(secret).toMatch(/^sk-\w{43}$/);
    await page.getByTestId(`key-ci-${mark}`).waitFor();
    await shot(page, "api-key-created");
    // The new key works; the page shows it no more once left.
    expect(
      (
        await fetch(`${target.url}/api/v1/account`, {
          headers: { authorization: `Bearer ${secret}` },
        })
      ).status,
    ).toBe(200);
    await page.getByRole("button", { name: "Done" }).click();
    expect(await page.content()).not.toContain(secret);
    await page.reload();
    await page.getByTestId(`key-ci-${mark}`).waitFor();
    expect(await page.content()).not.toContain(secret);

    await page.getByRole("button", { name: `Revoke ci-${mark}` }).click();
    await page.getByRole("button", { name: `Confirm revoking ci-${mark}` }).click();
    await expect.poll(() => page.getByTestId(`key-ci-${mark}`).count()).toBe(0);
    await expect
      .poll(
        async () =>
          (
            await fetch(`${target.url}/api/v1/account`, {
              headers: { authorization: `Bearer ${secret}` },
            })
          ).status,
        { timeout: 30_000 },
      )
      .toBe(401);
    await shot(page, "api-keys-1280");
    done();
  });

  it("shows a member key no API keys page, and environments read-only", async () => {
    const member = await json(
      await api("/apikeys", { body: { name: `member-${mark}`, role: "member" } }),
      201,
    );
    const { page, done } = await open();
    await signIn(page, "/api-keys", member.key);
    await page.getByTestId("admin-only").waitFor();
    expect(await page.getByRole("link", { name: "API keys" }).count()).toBe(0);
    expect(await page.getByTestId("api-keys").count()).toBe(0);
    await shot(page, "api-keys-member");
    await page.goto(`${target.url}/environments`);
    await page.getByTestId("environments").waitFor();
    expect(await page.getByRole("link", { name: "New environment" }).count()).toBe(0);
    // A member may still edit interactions.
    await page.goto(`${target.url}/interactions/${interactionId}`);
    await page.getByRole("button", { name: "Save draft" }).waitFor();
    done();
  });

  it("shows the API's message for an interaction that is not there", async () => {
    const { page, done } = await open({ expectStatuses: [404] });
    await signIn(page, "/interactions/no-such-interaction");
    await expect(page.getByTestId("error").textContent()).resolves.toMatch(/not found|no-such/i);
    done();
  });
});
