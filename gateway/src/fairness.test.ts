import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseSse } from "@pies/testkit";
import { startTestPies, type TestPies } from "../test/in-memory-pies.js";
import { request } from "../test/requests.js";

// The real gateway over the real services, in memory, with small per-project limits: 3 executions
// and 2 jst renders per project, two template workers, and a template time limit long enough that
// an endless template of one project is still running while the other project's requests finish
// (the assertions are about outcomes and order, never about milliseconds).
const TEMPLATE_TIMEOUT_MS = 1000;
const MAX_EXECUTIONS = 3;
const MAX_RENDERS = 2;

let pies: TestPies;

interface Tenant {
  key: string;
  environmentId: string;
}
let a: Tenant;
let b: Tenant;

beforeAll(async () => {
  pies = await startTestPies({
    executor: {
      PIES_TEMPLATE_WORKERS: 2,
      PIES_TEMPLATE_TIMEOUT_MS: TEMPLATE_TIMEOUT_MS,
      PIES_PROJECT_MAX_EXECUTIONS: MAX_EXECUTIONS,
      PIES_PROJECT_MAX_RENDERS: MAX_RENDERS,
    },
  });
  a = { key: pies.key, environmentId: pies.environmentId };
  const { project } = await pies.catalog.createAccount({ name: "other" });
  const { environment } = await pies.catalog.createEnvironment({
    projectId: project!.id,
    environment: { name: "test", provider: "test", defaultModel: "test" },
  });
  b = {
    key: (await pies.catalog.createApiKey({ projectId: project!.id })).secret,
    environmentId: environment!.id,
  };
}, 60_000);

afterAll(async () => {
  await pies?.close();
});

const call = (tenant: Tenant, url: string, body?: unknown) =>
  request(pies.app, body === undefined ? "GET" : "POST", url, { key: tenant.key, body });

let names = 0;
/** An interaction of one template (jst unless said); its id. */
async function interaction(
  tenant: Tenant,
  content: string,
  name = `t${++names}`,
  contentType = "jst",
) {
  const prompt = await call(tenant, "/prompts", {
    name,
    role: "user",
    content_type: contentType,
    content,
  });
  expect(prompt.status, prompt.text).toBe(201);
  const created = await call(tenant, "/interactions", {
    name: `I${++names}`,
    environment: tenant.environmentId,
    prompts: [{ type: "template", template: prompt.json.id }],
  });
  expect(created.status, created.text).toBe(201);
  return created.json.id as string;
}

const timedOut = (name: string) =>
  `template error: prompt template ${name}: template did not finish within ${TEMPLATE_TIMEOUT_MS} ms`;

function expectRateLimited(response: Awaited<ReturnType<typeof call>>, message: RegExp) {
  expect(response.status, response.text).toBe(429);
  expect(response.headers["retry-after"]).toBe("1");
  expect(response.json).toEqual({
    error: "Too Many Requests",
    status: 429,
    code: "rate_limited",
    message: expect.stringMatching(message),
  });
}

/** Polls until `check` holds (the runs a project has in flight, say). */
async function until(check: () => Promise<boolean>) {
  while (!(await check())) await new Promise((resolve) => setImmediate(resolve));
}

describe("fairness between projects", () => {
  it("refuses a project's renders beyond its share with 429 Retry-After, and another project's execute completes first", async () => {
    const endless = await interaction(a, "while (true) {} return 1", "endless");
    // String(x): a call, so these render in the sandbox's workers too (a template literal over data
    // keys alone renders on the executor's thread and would hold no worker and no share).
    const good = await interaction(a, "return `fine ${String(x)}`");
    const other = await interaction(b, "return `hello ${String(x)}`");

    const order: string[] = [];
    const track = <T>(name: string, request: Promise<T>) =>
      request.then((response) => {
        order.push(name);
        return response;
      });
    // Three endless templates of project a: two hold its share of renders, one is refused.
    const flood = [1, 2, 3].map((i) =>
      track(`a${i}`, call(a, `/interactions/${endless}/execute`, { data: {} })),
    );
    // Project a runs on at most one of the two workers, so b's render finds the other free.
    const fromB = await track("b", call(b, `/interactions/${other}/execute`, { data: { x: 1 } }));
    expect(fromB.status, fromB.text).toBe(200);
    expect(fromB.json.result).toBeTypeOf("string");

    const answers = await Promise.all(flood);
    const refused = answers.filter((r) => r.status === 429);
    const failed = answers.filter((r) => r.status === 400);
    expect(refused).toHaveLength(1);
    expectRateLimited(refused[0]!, /has 2 template renders running or queued, its limit/);
    expect(failed.map((r) => r.json.message)).toEqual([timedOut("endless"), timedOut("endless")]);
    // b's answer came before those of a's renders (the refusal may come before or after it).
    const bAt = order.indexOf("b");
    const renderedAt = answers
      .map((r, i) => (r.status === 400 ? order.indexOf(`a${i + 1}`) : -1))
      .filter((at) => at >= 0);
    expect(renderedAt.every((at) => at > bAt)).toBe(true);

    // Nothing of a's share is left held: both of its renders at once succeed.
    const after = await Promise.all(
      [1, 2].map((x) => call(a, `/interactions/${good}/execute`, { data: { x } })),
    );
    expect(after.map((r) => r.status)).toEqual([200, 200]);
  });

  it("fails an endless loop in an async function with the template time-limit error", async () => {
    const asyncLoop = await interaction(
      a,
      "(async () => { while (true) {} })(); return 'x'",
      "async-endless",
    );
    const syncLoop = await interaction(a, "while (true) {} return 'x'", "sync-endless");
    const [asyncAnswer, syncAnswer] = await Promise.all([
      call(a, `/interactions/${asyncLoop}/execute`, { data: {} }),
      call(a, `/interactions/${syncLoop}/execute`, { data: {} }),
    ]);
    expect(asyncAnswer.status, asyncAnswer.text).toBe(400);
    expect(asyncAnswer.json.message).toBe(timedOut("async-endless"));
    expect(syncAnswer.json.message).toBe(timedOut("sync-endless"));
  });

  it("refuses a project's executions beyond its limit with 429 Retry-After, blocking and streamed, and not another project's", async () => {
    // Handlebars: these executions hold no render.
    const slow = await interaction(a, "slow {{x}}", "slow", "handlebars");
    const other = await interaction(b, "return `hello ${x}`");
    const body = (x: number) => ({ data: { x }, config: { model: "test-latency-3000" } });
    const held = [1, 2, 3].map((x) => call(a, `/interactions/${slow}/execute`, body(x)));
    let streamed: Awaited<ReturnType<typeof call>>;
    try {
      // Blocking runs are recorded while the provider works: all three are in flight.
      await until(async () => {
        const runs = await call(a, `/runs?interaction=${slow}`);
        return runs.json.filter((r: { status: string }) => r.status === "processing").length === 3;
      });

      expectRateLimited(
        await call(a, `/interactions/${slow}/execute`, { data: { x: 4 } }),
        /has 3 executions running, its limit/,
      );
      // A streamed run is created (no execution yet), but its stream cannot start it.
      streamed = await call(a, "/runs", { interaction: slow, stream: true, data: { x: 5 } });
      expect(streamed.status, streamed.text).toBe(200);
      expectRateLimited(
        await call(a, `/runs/${streamed.json.id}/stream`),
        /has 3 executions running, its limit/,
      );
      expect((await call(a, `/runs/${streamed.json.id}`)).json.status).toBe("created");
      // Another project executes meanwhile.
      expect((await call(b, `/interactions/${other}/execute`, { data: { x: 1 } })).status).toBe(
        200,
      );
    } finally {
      // Even when an assertion above fails, the tests after this one start with no slot held.
      await Promise.allSettled(held);
    }
    expect((await Promise.all(held)).map((r) => r.status)).toEqual([200, 200, 200]);
    // Slots given back: the stream starts now and ends with close.
    const stream = await call(a, `/runs/${streamed.json.id}/stream`);
    expect(stream.status).toBe(200);
    const close = parseSse(stream.text).at(-1)!;
    expect(close.event).toBe("close");
    expect(JSON.parse(close.data).status).toBe("completed");
  });

  it("gives execution slots back after failures", async () => {
    // Handlebars: these hold executions, not renders (those have their own test above).
    const ok = await interaction(a, "ok {{x}}", "ok", "handlebars");
    const broken = await interaction(a, "Hello {{#if x}}", "broken", "handlebars");
    // Three times the limit, a limit's worth at a time: provider failures, template errors, a
    // missing interaction.
    for (const failing of [
      {
        url: `/interactions/${ok}/execute`,
        body: { data: { x: 1 }, config: { model: "test-fail" } },
      },
      { url: `/interactions/${broken}/execute`, body: { data: {} } },
      { url: "/interactions/nope/execute", body: { data: {} } },
    ]) {
      const answers = await Promise.all(
        Array.from({ length: MAX_EXECUTIONS }, () => call(a, failing.url, failing.body)),
      );
      for (const r of answers) expect([400, 404, 502]).toContain(r.status);
    }
    const after = await Promise.all(
      Array.from({ length: MAX_EXECUTIONS }, (_, x) =>
        call(a, `/interactions/${ok}/execute`, { data: { x } }),
      ),
    );
    expect(after.map((r) => r.status)).toEqual([200, 200, 200]);
  });
});
