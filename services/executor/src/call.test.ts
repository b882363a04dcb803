import { describe, expect, it } from "vitest";
import { create, fromBinary, fromJson, toBinary } from "@bufbuild/protobuf";
import { MAX_JSON_DEPTH, seededRandom, type JsonValue, jsonBytes } from "@pies/common";
import { EnvironmentSchema } from "@pies/proto/catalog";
import { RunSchema, RunStatus, TokenUsageSchema, type Run } from "@pies/proto/runs";
import {
  callProvider,
  endedRun,
  RETRY_BASE_MS,
  RETRY_MAX_MS,
  retryDelayMs,
  type Outcome,
} from "./call.js";
import { randomMessageJson } from "../../../common/test/run-samples.js";
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

describe("endedRun", () => {
  it("keeps every field of the run it ends but those the outcome sets", () => {
    // Every field of Run set, from the descriptors: a field added to Run that copyRun does not
    // copy is missing from the ended run, and this fails.
    const random = seededRandom(5);
    for (let i = 0; i < 50; i++) {
      const run = fromJson(RunSchema, randomMessageJson(random, RunSchema, 2));
      const ended = endedRun(run, { ok: true, result: "done", usage: USAGE }, Date.now());
      const set = new Set(["status", "resultJson", "tokenUse", "executionTime"]);
      for (const field of current) {
        if (set.has(field.localName)) continue;
        expect(ended[field.localName as keyof Run], field.localName).toBe(
          run[field.localName as keyof Run],
        );
      }
      expect(ended.status).toBe(RunStatus.COMPLETED);
      // The same record as the run with those fields set.
      const expected: Run = {
        ...run,
        status: RunStatus.COMPLETED,
        resultJson: jsonBytes("done"),
        tokenUse: create(TokenUsageSchema, USAGE),
        executionTime: ended.executionTime,
      };
      // The old payload fields are not copied: nothing of this release sets them.
      for (const field of RunSchema.fields) {
        if (field.deprecated) delete (expected as Record<string, unknown>)[field.localName];
      }
      // Compared as Buffers: toEqual walks a large Uint8Array element by element (8 s for 50).
      const got = Buffer.from(toBinary(RunSchema, ended));
      const want = Buffer.from(toBinary(RunSchema, expected));
      expect(got.equals(want), `run ${i}: the ended run's bytes are not the expected run's`).toBe(
        true,
      );
    }
  });

  it("gives every ended run one shape, however the run was built", () => {
    const built = endedRun(create(RunSchema, { id: "a" }), OK, Date.now());
    const literal = endedRun({ ...create(RunSchema), id: "b", cacheKey: "k" }, OK, Date.now());
    const failed = endedRun(create(RunSchema, { id: "c" }), FAILED, Date.now());
    expect(Object.keys(built)).toEqual(Object.keys(literal));
    expect(Object.keys(built)).toEqual(Object.keys(failed));
    // Its own fields only: the run given is left as it was.
    expect(Object.keys(built).sort()).toEqual(
      ["$typeName", ...current.map((f) => f.localName)].sort(),
    );
  });
});

/** Run's fields but the old payload fields (legacy-payloads.ts), which copyRun leaves out. */
const current = RunSchema.fields.filter((f) => !f.deprecated);
const USAGE = { prompt: 3, result: 2, total: 5 };
const OK: Outcome = { ok: true, result: { a: 1 }, usage: USAGE };
const FAILED: Outcome = { ok: false, code: "provider_error", message: "no" };
