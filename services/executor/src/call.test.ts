import { describe, expect, it } from "vitest";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { MAX_JSON_DEPTH, type JsonValue } from "@pies/common";
import { EnvironmentSchema } from "@pies/proto/catalog";
import { RunSchema } from "@pies/proto/runs";
import { callProvider, endedRun, RETRY_BASE_MS, RETRY_MAX_MS, retryDelayMs } from "./call.js";
import type { ExecutorDeps } from "./context.js";
import type { CompletionRequest } from "./providers/types.js";
import { SchemaValidator } from "./schemas.js";

describe("retryDelayMs", () => {
  it("doubles from the base with each retry, jittered down by at most a quarter", () => {
    expect(retryDelayMs(0, 0, 0)).toBe(RETRY_BASE_MS);
    expect(retryDelayMs(1, 0, 0)).toBe(RETRY_BASE_MS * 2);
    expect(retryDelayMs(3, 0, 0)).toBe(RETRY_BASE_MS * 8);
    expect(retryDelayMs(0, 0, 1)).toBe(RETRY_BASE_MS * 0.75);
    for (let i = 0; i < 100; i++) {
      const d = retryDelayMs(2, 0);
      expect(d).toBeGreaterThanOrEqual(RETRY_BASE_MS * 4 * 0.75);
      expect(d).toBeLessThanOrEqual(RETRY_BASE_MS * 4);
    }
  });

  it("is capped", () => {
    expect(retryDelayMs(30, 0, 0)).toBe(RETRY_MAX_MS);
  });

  it("never waits less than the provider's Retry-After", () => {
    expect(retryDelayMs(0, 2_000, 0)).toBe(2_000);
    expect(retryDelayMs(10, 20_000, 0)).toBe(20_000);
    // A Retry-After shorter than the backoff: the backoff.
    expect(retryDelayMs(1, 10, 0)).toBe(RETRY_BASE_MS * 2);
  });
});

describe("callProvider", () => {
  const nested = (depth: number): JsonValue => {
    let json: JsonValue = true;
    for (let i = 0; i < depth; i++) json = [json];
    return json;
  };
  /** A provider whose answers are these, in order; what it was sent is kept. */
  const calling = (answers: string[]) => {
    const sent: CompletionRequest[] = [];
    const deps = {
      providers: {
        client: () => ({
          complete: (request: CompletionRequest) => {
            sent.push(request);
            return Promise.resolve({
              content: answers[sent.length - 1],
              usage: { prompt: 1, result: 1, total: 2 },
            });
          },
        }),
      },
      schemas: new SchemaValidator(),
      providerMaxRetries: 0,
    } as unknown as ExecutorDeps;
    const environment = create(EnvironmentSchema, { id: "e", provider: "test" });
    const request = { model: "m", messages: [{ role: "user" as const, content: "hi" }] };
    return { deps, environment, request, sent };
  };

  it("repairs an answer nested deeper than a run's result can be, as any invalid answer", async () => {
    const deep = JSON.stringify(nested(MAX_JSON_DEPTH + 1));
    const fine = JSON.stringify(nested(MAX_JSON_DEPTH));
    const { deps, environment, request, sent } = calling([deep, fine]);
    const outcome = await callProvider(deps, environment, "", { ...request, schema: {} });
    expect(outcome).toMatchObject({ ok: true, result: nested(MAX_JSON_DEPTH) });
    expect(sent).toHaveLength(2);
    expect(outcome.attempts?.[0]?.error).toMatchObject({
      code: "validation_error",
      message: `the answer is nested deeper than ${MAX_JSON_DEPTH} levels (at ${Array(MAX_JSON_DEPTH).fill(0).join(".")})`,
    });
    // Never a valid one: the run fails with it, and its record reads back.
    const failed = await callProvider(calling([deep, deep, deep]).deps, environment, "", {
      ...request,
      schema: {},
    });
    expect(failed).toMatchObject({ ok: false, code: "validation_error" });
    const run = endedRun(create(RunSchema, { id: "r" }), failed, Date.now());
    expect(fromBinary(RunSchema, toBinary(RunSchema, run)).attempts).toHaveLength(3);
  });

  it("repairs an answer with a number beyond a double's range (Infinity once parsed)", async () => {
    const { deps, environment, request, sent } = calling(['{"n":[1e400]}', '{"n":[1]}']);
    const outcome = await callProvider(deps, environment, "", { ...request, schema: {} });
    expect(outcome).toMatchObject({ ok: true, result: { n: [1] } });
    expect(sent).toHaveLength(2);
    expect(outcome.attempts?.[0]?.error?.message).toBe(
      "the answer has a number beyond a double's range (at n.0)",
    );
  });

  it("takes an answer without a schema as text, however it nests", async () => {
    const deep = JSON.stringify(nested(MAX_JSON_DEPTH + 10));
    const { deps, environment, request } = calling([deep]);
    expect(await callProvider(deps, environment, "", request)).toMatchObject({
      ok: true,
      result: deep,
    });
  });
});
