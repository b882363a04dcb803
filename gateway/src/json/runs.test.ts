import { create, isFieldSet, type DescMessage, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import { jsonBytes, jsonOf } from "@pies/common";
import { ExecuteRequestSchema, type CallerSchema } from "@pies/proto/executor";
import { RunSchema, RunStatus, RunStore, SearchMetaSchema } from "@pies/proto/runs";
import {
  answeredRun,
  executeBody,
  executeRequest,
  facetsSearch,
  runJson,
  searchMetaJson,
  searchRunsRequest,
  type ExecuteBody,
} from "./runs.js";
import { referenceRunJson } from "../../test/run-json-reference.js";

// The execute routes' run (the executor's answer) rendered as the REST API's JSON, byte for byte
// as the reference renderer, and the request they send.

const text = "the quarterly report: revenue grew 12%, costs fell 3%";
const base = {
  id: "01a20b479bb5f0391e77b98a",
  projectId: "01a20b479bb5f0391e77b900",
  accountId: "01a20b479bb5f0391e77b901",
  interactionId: "01a20b479bb5f0391e77b902",
  interactionName: "Summarise",
  environmentId: "01a20b479bb5f0391e77b903",
  environmentName: "fake",
  provider: "openai_compatible",
  modelId: "gpt-4o-mini",
};

const runs: Record<string, MessageInitShape<typeof RunSchema>> = {
  empty: {},
  created: { ...base, status: RunStatus.CREATED, stream: true, createdAt: timestampFromMs(0) },
  completed: {
    ...base,
    status: RunStatus.COMPLETED,
    parametersJson: jsonBytes({ text, n: 1.5, nested: { list: [1, "two", null, true] } }),
    promptJson: jsonBytes([{ role: "user", content: `Summarise ${text}` }]),
    resultJson: jsonBytes("Revenue up 12%."),
    tags: ["a", "b,c", "é ✓"],
    config: { environmentId: base.environmentId, model: "gpt-4o-mini", temperature: 0.7 },
    source: {
      type: "api",
      label: "ci",
      principalType: "apikey",
      principalId: "k1",
      clientIp: "::1",
    },
    tokenUse: { prompt: 31, result: 12, total: 43 },
    cost: { input: 0.0000047, output: 0.0000072, total: 0.0000119, currency: "USD" },
    executionTime: 6n,
    createdAt: { seconds: 1_790_000_000n, nanos: 123_456_789 },
    updatedAt: { seconds: 1_790_000_001n, nanos: 999_999_999 },
    interactionStatus: "published",
    interactionPrompts: [
      { id: "s1", type: "template", templateId: "t1" },
      { id: "s2", type: "chat", chatPath: "history" },
      {},
    ],
    interactionUpdatedAt: { seconds: 1_780_000_000n, nanos: 5_000_000 },
    projectName: "default",
    accountName: 'Acme "é"',
  },
  "zeros and presence": {
    ...base,
    status: RunStatus.COMPLETED,
    // Set but at their defaults: present in the message, left out or empty in its JSON.
    config: { temperature: 0, maxTokens: 0, maxRepairs: 0 },
    source: {},
    tokenUse: {},
    cost: { estimated: true },
    executionTime: 0n,
    resultJson: jsonBytes(null),
    promptJson: jsonBytes({}),
    parametersJson: jsonBytes({}),
    cachePolicyJson: jsonBytes({}),
    createdAt: { seconds: 0n, nanos: 500_000 },
  },
  "failed with attempts": {
    ...base,
    status: RunStatus.FAILED,
    error: {
      code: "invalid_result",
      message: "no JSON",
      dataJson: jsonBytes({ raw: "x", at: [1] }),
    },
    attempts: [
      {
        number: 1,
        promptAddedJson: jsonBytes([]),
        error: { code: "invalid_result", message: "m" },
      },
      {
        number: 2,
        promptAddedJson: jsonBytes([{ role: "user", content: "fix it" }]),
        tokenUse: { prompt: 1, total: 1 },
        error: { code: "timeout" },
        environmentId: "e_routed",
        model: "m-2",
        durationMs: 250,
      },
      {},
    ],
    config: { formatter: "json", maxTokens: 100, model: "m" },
    ttl: 3600,
    parentId: "parent",
    cached: true,
    cachedFrom: "other",
    cachePolicyJson: jsonBytes({ type: "cache", ttl: 60 }),
    resultSchemaJson: jsonBytes({ type: "object" }),
    cacheKey: "k",
    updatedAt: { seconds: -1n, nanos: 1_000 },
  },
  "metadata-only": {
    ...base,
    status: RunStatus.COMPLETED,
    store: RunStore.METADATA,
    parametersJson: jsonBytes({}),
    tokenUse: { prompt: 31, result: 12, total: 43 },
  },
  "timeout, error without data": {
    ...base,
    status: RunStatus.FAILED,
    error: { code: "timeout", message: "" },
    executionTime: 9_007_199_254_740_993n,
  },
};

describe("a run rendered as the REST API answers it", () => {
  for (const [name, init] of Object.entries(runs)) {
    it(`renders ${name} as the reference does`, () => {
      const run = create(RunSchema, init);
      expect(JSON.stringify(runJson(run))).toBe(JSON.stringify(referenceRunJson(run)));
      const answered = answeredRun(run);
      expect(answered.json()).toEqual(runJson(run));
      expect(answered.status).toBe(run.status);
    });
  }

  it("has every field of a run set in some run of the corpus (a new field needs rendering too)", () => {
    const set = RunSchema.fields.filter((field) =>
      Object.values(runs).some((init) => isFieldSet(create(RunSchema, init), field)),
    );
    const current = RunSchema.fields.filter((f) => !f.deprecated);
    expect(set.map((f) => f.name)).toEqual(current.map((f) => f.name));
  });
});

describe("the execute request", () => {
  const schema = executeBody({ maxNameLength: 256 });
  const bodies: Record<string, unknown> = {
    minimal: {},
    "data only": { data: { text, n: [1, { a: null }], t: true } },
    "null data": { data: null },
    everything: {
      stream: true,
      data: { text },
      tags: "a, b ,,c",
      parent: "p1",
      extra: "passed through, not sent",
      config: {
        environment: "e",
        model: "m",
        temperature: 0,
        max_tokens: 10,
        formatter: 3,
        max_repairs: 0,
        cache_policy: { type: "cache", ttl: 0, varies_on: ["text"], refresh_probability: 0 },
        other: 1,
      },
    },
    "cache policy, defaults": { config: { cache_policy: { type: "no_cache" } }, tags: [] },
  };
  const caller: MessageInitShape<typeof CallerSchema> = {
    accountId: "a",
    projectId: "p",
    accountName: "Acme é",
    projectName: "default",
    source: { type: "api", label: "k", principalType: "apikey", principalId: "i", clientIp: "::1" },
  };
  const interactions = [
    { case: "interactionId" as const, value: "01a20b479bb5f0391e77b902" },
    { case: "interactionName" as const, value: "Summarise@latest" },
  ];
  it("carries the body's data as its JSON bytes, and none as no bytes", () => {
    for (const [name, raw] of Object.entries(bodies)) {
      const body = schema.parse(raw) as ExecuteBody;
      const message = create(ExecuteRequestSchema, executeRequest(body, interactions[0]!, caller));
      expect(jsonOf(message.dataJson), name).toEqual(body.data ?? undefined);
      expect(message.data, name).toBeUndefined();
    }
  });

  it("has every field of the request set by some body (a new field needs writing too)", () => {
    const requests = Object.values(bodies).flatMap((raw) =>
      interactions.map((interaction) =>
        create(
          ExecuteRequestSchema,
          executeRequest(schema.parse(raw) as ExecuteBody, interaction, caller),
        ),
      ),
    );
    // Every field, nested messages' fields included, by path.
    const unset: string[] = [];
    const visit = (desc: DescMessage, messages: object[], path: string) => {
      for (const field of desc.fields) {
        // The old payload fields are only read (legacy-payloads.ts).
        if (field.deprecated) continue;
        const holding = messages.filter((m) => isFieldSet(m as never, field));
        if (holding.length === 0) unset.push(path + field.name);
        else if (field.fieldKind === "message" && !field.message.typeName.startsWith("google."))
          visit(
            field.message,
            holding.map((m) => (m as Record<string, unknown>)[field.localName] as object),
            `${path}${field.name}.`,
          );
      }
    };
    visit(ExecuteRequestSchema, requests, "");
    // `ttl` and `detached` are for internal callers: the REST body has neither (the service's
    // default ttl applies; an experiment's replays are detached by the runs service). `start` and
    // `run_id` are set by the route of a one-request stream (its Accept header), not the body.
    expect(unset).toEqual(["ttl", "detached", "start", "run_id"]);
  });
});

describe("a search's meta", () => {
  const meta = (total: bigint, lowerBound: boolean) =>
    create(SearchMetaSchema, { total, lowerBound, facets: {} });

  it("counts the runs that match, or says at least how many past the count's bound", () => {
    expect(searchMetaJson({ onlyMeta: true }, meta(42n, false))).toEqual({ count: { total: 42 } });
    expect(searchMetaJson({ onlyMeta: true }, meta(10_000n, true))).toEqual({
      count: { lower_bound: 10_000 },
    });
  });

  it("asks for an exact total when told to, and always for POST /runs/facets", () => {
    expect(searchRunsRequest({ exactTotal: true }, "p").exactTotal).toBe(true);
    expect(searchRunsRequest({}, "p").exactTotal).toBe(false);
    const facets = facetsSearch({
      facets: [{ name: "t", facet: { type: "string", path: "tags", numBuckets: 10 } }],
    });
    expect(searchRunsRequest(facets, "p").exactTotal).toBe(true);
  });
});
