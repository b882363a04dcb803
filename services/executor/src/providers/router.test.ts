import { create } from "@bufbuild/protobuf";
import { jsonBytes, seededRandom, type JsonObject } from "@pies/common";
import {
  EnvironmentSchema,
  RoutedEnvironmentSchema,
  type Environment,
  type RoutedEnvironment,
} from "@pies/proto/catalog";
import { describe, expect, it } from "vitest";
import { Router, type RouteTry } from "./router.js";
import { TestClient } from "./test-provider.js";
import {
  ProviderError,
  type CompletionRequest,
  type CompletionResult,
  type LlmClient,
} from "./types.js";

// The router over the built-in test provider, whose models fail as each failure kind does
// (test-refused, test-429, test-500, test-timeout) or break off after a first chunk.

const test = new TestClient();
const member = (id: string, defaultModel = "test") =>
  create(RoutedEnvironmentSchema, {
    environment: create(EnvironmentSchema, { id, provider: "test", defaultModel }),
  });
const virtual = (config: JsonObject): Environment =>
  create(EnvironmentSchema, { id: "v", provider: "virtual_lb", configJson: jsonBytes(config) });
const request: CompletionRequest = {
  model: "",
  messages: [{ role: "user", content: "hello" }],
};

/** A router whose clients are the test provider's, counting the calls per environment. */
function router(options: { random?: () => number; now?: () => number } = {}) {
  const calls = new Map<string, number>();
  const clients = {
    client(environment: Environment): LlmClient {
      calls.set(environment.id, (calls.get(environment.id) ?? 0) + 1);
      return test;
    },
  };
  return {
    router: new Router(
      clients,
      { failures: 3, coolDownMs: 1000 },
      options.random ?? Math.random,
      options.now ?? Date.now,
    ),
    calls,
  };
}

async function run(
  r: Router,
  environment: Environment,
  routes: RoutedEnvironment[],
  onChunk?: (t: string) => void,
): Promise<{ value?: CompletionResult; error?: ProviderError; tries: RouteTry[] }> {
  const tries: RouteTry[] = [];
  const result = await r
    .client(environment, routes, tries)
    .complete(request, onChunk ? { onChunk } : {})
    .then(
      (value) => ({ value }),
      (error: unknown) => ({ error: error as ProviderError }),
    );
  return { ...result, tries };
}

describe("a virtual environment's routing", () => {
  it("picks entries by weight: within 2 points of their shares over 10,000 choices", () => {
    const { router: r } = router({ random: seededRandom(42) });
    const routing = {
      entries: [1, 3, 6].map((weight, i) => ({ environmentId: `e${i}`, model: "", weight })),
      failover: true,
    };
    const firsts = [0, 0, 0];
    for (let n = 0; n < 10_000; n++) {
      const order = r.order(routing);
      expect(order.slice().sort()).toEqual([0, 1, 2]);
      firsts[order[0]!]!++;
    }
    expect(Math.abs(firsts[0]! / 10_000 - 0.1)).toBeLessThan(0.02);
    expect(Math.abs(firsts[1]! / 10_000 - 0.3)).toBeLessThan(0.02);
    expect(Math.abs(firsts[2]! / 10_000 - 0.6)).toBeLessThan(0.02);
  });

  for (const failing of ["test-refused", "test-429", "test-500", "test-timeout"]) {
    it(`fails over from ${failing} to the next entry, keeping both calls`, async () => {
      // The failing entry first (its weight makes it so but for one draw in a million).
      const environment = virtual({
        entries: [
          { model: `a::${failing}`, weight: 1_000_000 },
          { model: "b::", weight: 1 },
        ],
        failover: true,
      });
      const { router: r, calls } = router({ random: seededRandom(7) });
      const { value, tries } = await run(r, environment, [member("a"), member("b")]);
      expect(value?.content).toMatch(/^Test answer/);
      expect(tries.map((t) => [t.environmentId, t.model, t.error?.code])).toEqual([
        ["a", failing, failing === "test-timeout" ? "timeout" : "provider_error"],
        ["b", "test", undefined],
      ]);
      expect([...calls]).toEqual([
        ["a", 1],
        ["b", 1],
      ]);
    });
  }

  it("never fails over after a first chunk, nor on a failure the request causes", async () => {
    for (const [model, code] of [
      ["test-fail-midstream", "stream_error"],
      ["test-fail", "provider_error"],
    ] as const) {
      const environment = virtual({
        entries: [{ model: `a::${model}`, weight: 1_000_000 }, { model: "b::" }],
        failover: true,
      });
      const chunks: string[] = [];
      const { error, tries } = await run(
        router({ random: seededRandom(3) }).router,
        environment,
        [member("a"), member("b")],
        (t) => chunks.push(t),
      );
      expect(error?.code, model).toBe(code);
      expect(tries, model).toHaveLength(1);
    }
  });

  it("without failover, a failure fails the run at its first entry", async () => {
    const environment = virtual({ entries: [{ model: "a::test-500" }, { model: "b::test-500" }] });
    const { error, tries } = await run(router().router, environment, [member("a"), member("b")]);
    expect(error?.message).toBe("provider answered 500: server error (test-500)");
    expect(tries).toHaveLength(1);
  });

  it("fails over from an entry whose environment is gone", async () => {
    const environment = virtual({
      entries: [{ model: "gone::m", weight: 1_000_000 }, { model: "b::" }],
      failover: true,
    });
    const { value, tries } = await run(router({ random: seededRandom(5) }).router, environment, [
      member("b"),
    ]);
    expect(value?.content).toMatch(/^Test answer/);
    expect(tries[0]!.error?.message).toBe("environment gone of the route no longer exists");
  });

  it("opens an entry's circuit after failures in a row, probes it after the cool-down, closes on success", async () => {
    let now = 0;
    // Entry a answers 503 until it is healthy again.
    let healthy = false;
    const flaky: LlmClient = {
      complete: async () => {
        if (healthy) return { content: "from a" };
        const error = new ProviderError("provider answered 503: busy");
        error.failover = true;
        throw error;
      },
    };
    const calls = new Map<string, number>();
    const r = new Router(
      {
        client(environment) {
          calls.set(environment.id, (calls.get(environment.id) ?? 0) + 1);
          return environment.id === "a" ? flaky : test;
        },
      },
      { failures: 3, coolDownMs: 1000 },
      seededRandom(9),
      () => now,
    );
    const environment = virtual({
      entries: [{ model: "a::m", weight: 1_000_000 }, { model: "b::" }],
      failover: true,
    });
    const routes = [member("a"), member("b")];
    for (let n = 0; n < 3; n++) {
      expect((await run(r, environment, routes)).tries.map((t) => t.environmentId)).toEqual([
        "a",
        "b",
      ]);
    }
    expect(r.states().get("v|a|m")).toBe("open");
    // Open: skipped, the next entry answers at once.
    expect((await run(r, environment, routes)).tries.map((t) => t.environmentId)).toEqual(["b"]);
    expect(calls.get("a")).toBe(3);
    // After the cool-down one call probes it; it fails, and the circuit opens again.
    now += 1000;
    expect(r.states().get("v|a|m")).toBe("half_open");
    await run(r, environment, routes);
    expect(calls.get("a")).toBe(4);
    expect(r.states().get("v|a|m")).toBe("open");
    // A probe that succeeds closes it.
    now += 1000;
    healthy = true;
    const probe = await run(r, environment, routes);
    expect(probe.value?.content).toBe("from a");
    expect(r.states().get("v|a|m")).toBe("closed");
  });

  it("skips an entry whose circuit is open, with failover or without, and keeps retries for the last it calls", async () => {
    const now = 0;
    const retries: (number | undefined)[] = [];
    const r = new Router(
      {
        client: (environment) => ({
          complete: (req, opts) => {
            retries.push(opts.maxRetries);
            return environment.id === "a"
              ? test.complete({ ...req, model: "test-500" }, opts)
              : test.complete(req, opts);
          },
        }),
      },
      { failures: 1, coolDownMs: 1000 },
      seededRandom(11),
      () => now,
    );
    const routes = [member("a"), member("b")];
    const failing = virtual({ entries: [{ model: "a::m", weight: 1_000_000 }, { model: "b::" }] });
    // One failure opens a's circuit (failures: 1); without failover that call fails.
    expect((await run(r, failing, routes)).error?.code).toBe("provider_error");
    expect(r.states().get("v|a|m")).toBe("open");
    // Without failover, the next admissible entry is the one called while a is open.
    const skipped = await run(r, failing, routes);
    expect(skipped.value?.content).toMatch(/^Test answer/);
    expect(skipped.tries.map((t) => t.environmentId)).toEqual(["b"]);
    // With failover, b has no admissible successor: it is called with its own retries.
    retries.length = 0;
    await run(
      r,
      virtual({
        entries: [{ model: "b::", weight: 1_000_000 }, { model: "a::m" }],
        failover: true,
      }),
      routes,
    );
    expect(retries).toEqual([undefined]);
  });

  it("fails over from an entry whose model its environment no longer enables", async () => {
    const narrowed = create(RoutedEnvironmentSchema, {
      environment: create(EnvironmentSchema, {
        id: "a",
        provider: "test",
        defaultModel: "test",
        enabledModels: ["test"],
      }),
    });
    const environment = virtual({
      entries: [{ model: "a::test-500", weight: 1_000_000 }, { model: "b::" }],
      failover: true,
    });
    const { value, tries } = await run(router({ random: seededRandom(2) }).router, environment, [
      narrowed,
      member("b"),
    ]);
    expect(value?.content).toMatch(/^Test answer/);
    expect(tries[0]!.error?.message).toBe(
      "model test-500 is no longer enabled in environment a of the route",
    );
  });

  it("keeps a bounded number of breakers, however many virtual environments it routes", async () => {
    const { router: r } = router();
    const routes = [member("a")];
    for (let n = 0; n < 10_050; n++) {
      const environment = create(EnvironmentSchema, {
        id: `v${n}`,
        provider: "virtual_lb",
        configJson: jsonBytes({ entries: [{ model: "a::test" }] }),
      });
      await r.client(environment, routes, []).complete(request, {});
    }
    expect(r.states().size).toBe(10_000);
  });

  it("says so when every entry is cooling down", async () => {
    let now = 0;
    const { router: r } = router({ now: () => now });
    const environment = virtual({ entries: [{ model: "a::test-refused" }], failover: true });
    for (let n = 0; n < 3; n++) await run(r, environment, [member("a")]);
    const { error, tries } = await run(r, environment, [member("a")]);
    expect(error?.message).toBe(
      "every entry of virtual environment v is cooling down after failures (1 skipped)",
    );
    expect(tries).toHaveLength(0);
    now += 1000;
    expect((await run(r, environment, [member("a")])).tries).toHaveLength(1);
  });
});
