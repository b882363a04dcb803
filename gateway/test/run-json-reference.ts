import { create, toBinary } from "@bufbuild/protobuf";
import type { Kysely } from "kysely";
import { fromTimestamp, toTimestamp, jsonOf, jsonBytes } from "@pies/common";
import {
  RunSchema,
  RunStatus,
  runStatuses,
  RunStore,
  type Run,
  type RunAttempt,
} from "@pies/proto/runs";
import { writeRecords, type RunsDatabase } from "@pies/runs";

/**
 * The REST run as the gateway rendered it before the runs service did (gateway/src/json/runs.ts
 * `runJson` as it was, verbatim but for its imports and the fields runs gained since, cost and
 * store): the reference that the pages the runs service renders now (ListRunsResponse.runs_json)
 * must equal byte for byte.
 */
export function referenceRunJson(run: Run) {
  return compact({
    id: run.id,
    status: runStatuses.name(run.status) ?? "created",
    // SPEC.md's interaction reference, its status, prompts and updated_at as the run recorded them.
    interaction: compact({
      id: run.interactionId,
      name: run.interactionName,
      status: run.interactionStatus || undefined,
      prompts: run.interactionStatus
        ? run.interactionPrompts.map((p) =>
            p.type === "chat"
              ? { id: p.id, type: p.type, chat_path: p.chatPath }
              : { id: p.id, type: p.type || "template", template: p.templateId },
          )
        : undefined,
      updated_at: fromTimestamp(run.interactionUpdatedAt)?.toISOString(),
    }),
    environment: { id: run.environmentId, name: run.environmentName },
    modelId: run.modelId,
    parameters: jsonOf(run.parametersJson) ?? {},
    result: jsonOf(run.resultJson),
    prompt: jsonOf(run.promptJson),
    store: run.store === RunStore.METADATA ? "metadata" : undefined,
    tags: run.tags,
    config: compact({
      environment: run.config?.environmentId,
      model: run.config?.model,
      formatter: run.config?.formatter || undefined,
      temperature: run.config?.temperature,
      max_tokens: run.config?.maxTokens,
    }),
    temperature: run.config?.temperature,
    max_tokens: run.config?.maxTokens,
    token_use: run.tokenUse
      ? { prompt: run.tokenUse.prompt, result: run.tokenUse.result, total: run.tokenUse.total }
      : undefined,
    cost: run.cost
      ? {
          input: run.cost.input,
          output: run.cost.output,
          total: run.cost.total,
          currency: run.cost.currency,
          estimated: run.cost.estimated,
        }
      : undefined,
    execution_time: run.executionTime === undefined ? undefined : Number(run.executionTime),
    error: run.error
      ? compact({
          code: run.error.code,
          message: run.error.message,
          data: jsonOf(run.error.dataJson) ?? undefined,
        })
      : undefined,
    source: run.source
      ? {
          type: run.source.type,
          label: run.source.label,
          principal_type: run.source.principalType,
          principal_id: run.source.principalId,
          client_ip: run.source.clientIp,
        }
      : undefined,
    ttl: run.ttl || undefined,
    stream: run.stream,
    parent: run.parentId || undefined,
    account: { id: run.accountId, name: run.accountName },
    project: { id: run.projectId, name: run.projectName },
    cached: run.cached || undefined,
    cached_from: run.cachedFrom || undefined,
    cache_policy: jsonOf(run.cachePolicyJson),
    attempts: run.attempts.length > 0 ? run.attempts.map(attemptJson) : undefined,
    created_at: fromTimestamp(run.createdAt)?.toISOString(),
    updated_at: fromTimestamp(run.updatedAt)?.toISOString(),
  });
}

function attemptJson(a: RunAttempt) {
  return compact({
    number: a.number,
    prompt_added: jsonOf(a.promptAddedJson) ?? [],
    error: a.error
      ? compact({
          code: a.error.code,
          message: a.error.message,
          data: jsonOf(a.error.dataJson) ?? undefined,
        })
      : undefined,
    token_use: a.tokenUse
      ? { prompt: a.tokenUse.prompt, result: a.tokenUse.result, total: a.tokenUse.total }
      : undefined,
    environment: a.environmentId || undefined,
    model: a.model || undefined,
    duration_ms: a.environmentId ? a.durationMs : undefined,
  });
}

function compact<T extends Record<string, unknown>>(obj: T): T {
  const out: Record<string, unknown> = {};
  for (const key of Object.keys(obj)) if (obj[key] !== undefined) out[key] = obj[key];
  return out as T;
}

/**
 * Runs of `projectId` with every field a listed run can carry, in each of its forms: input data
 * with nesting, unicode, escapes and numbers of every kind; a result of each JSON type (and none);
 * an error with data, with null data and without; tags; a source; token use; a configuration with
 * temperature, max_tokens and a formatter, and one with none; a parent; a ttl; a cache hit with its
 * policy; a stream; the execution time; a metadata-only run. Newest first by position (updated_at descends).
 */
export function everyFieldRuns(projectId: string, accountId = "acc_every"): Run[] {
  const at = (i: number) => toTimestamp(new Date(Date.UTC(2026, 0, 2, 3, 4, 5, 678) - i * 61_001));
  const base = (i: number) => ({
    id: `every_${projectId.slice(-6)}_${String(i).padStart(2, "0")}`,
    projectId,
    accountId,
    interactionId: `int_${i % 3}`,
    interactionName: i % 2 ? "Summary" : 'Tri "quoted" — ünïcødé',
    environmentId: `env_${i % 2}`,
    environmentName: i % 2 ? "test" : "prod",
    provider: "test",
    modelId: ["gpt-4o", "o3-mini", "m/é"][i % 3],
    createdAt: at(i + 1),
    updatedAt: at(i),
    // Every third run recorded before runs carried their references' details.
    ...(i % 3 === 2
      ? {}
      : {
          interactionStatus: i % 2 ? "published" : "draft",
          interactionPrompts: [
            { id: `seg_${i}`, type: "template", templateId: `tpl_${i}` },
            ...(i % 2 ? [{ id: `chat_${i}`, type: "chat", chatPath: "history" }] : []),
          ],
          interactionUpdatedAt: at(i + 100),
          projectName: 'Proj "é"',
          accountName: "Acme",
        }),
  });
  const runs: Parameters<typeof create<typeof RunSchema>>[1][] = [
    {
      ...base(0),
      status: RunStatus.COMPLETED,
      parametersJson: jsonBytes({
        text: 'line\nbreak\t"quote" \\ back \u2028 sep ☃ 😀',
        nested: { deep: { list: [1, -2.5, 1e21, 0.1, true, false, null, "s", { k: [] }] } },
        empty: {},
        "key with spaces": "v",
        "10": "integer-like key",
      }),
      resultJson: jsonBytes({ summary: "done", score: 0.75, items: [1, 2, 3] }),
      tags: ["prod", "chat", "ünï"],
      config: {
        environmentId: "env_0",
        model: "gpt-4o",
        formatter: "json",
        temperature: 0.3,
        maxTokens: 512,
      },
      source: {
        type: "api",
        label: 'key "one"',
        principalType: "apikey",
        principalId: "k_1",
        clientIp: "203.0.113.7",
      },
      tokenUse: { prompt: 120, result: 80, total: 200 },
      executionTime: 1234n,
    },
    {
      ...base(1),
      status: RunStatus.FAILED,
      parametersJson: jsonBytes({ n: 1 }),
      error: {
        code: "validation_error",
        message: 'the answer is not valid: "x" is required',
        dataJson: jsonBytes([{ instancePath: "/x", message: "must have required property 'x'" }]),
      },
      tokenUse: { prompt: 10, result: 0, total: 10 },
      executionTime: 5n,
      tags: [],
      config: { environmentId: "env_1", model: "o3-mini", formatter: "" },
      parentId: "every_parent",
    },
    {
      ...base(2),
      status: RunStatus.FAILED,
      parametersJson: jsonBytes({}),
      error: { code: "timeout", message: "the provider timed out", dataJson: jsonBytes(null) },
      config: { environmentId: "", model: "", formatter: "" },
    },
    {
      // Metadata-only: its records carry no payloads (withoutPayloads), its configuration says so.
      ...base(3),
      status: RunStatus.FAILED,
      store: RunStore.METADATA,
      parametersJson: jsonBytes({}),
      error: { code: "provider_error", message: "upstream 500" },
    },
    {
      ...base(4),
      status: RunStatus.CREATED,
      stream: true,
      ttl: 300,
      parametersJson: jsonBytes({ text: "streamed" }),
      config: { environmentId: "env_0", model: "m/é", formatter: "", temperature: 0 },
    },
    {
      ...base(5),
      status: RunStatus.PROCESSING,
      stream: true,
      parametersJson: jsonBytes({ text: "going" }),
      config: { environmentId: "env_1", model: "gpt-4o", formatter: "", maxTokens: 1 },
    },
    {
      ...base(6),
      status: RunStatus.COMPLETED,
      parametersJson: jsonBytes({ q: "cached" }),
      resultJson: jsonBytes("a plain string result"),
      cached: true,
      cachedFrom: "every_origin",
      cachePolicyJson: jsonBytes({
        type: "cache",
        ttl: 3600,
        varies_on: ["q"],
        refresh_probability: 0.25,
      }),
      tokenUse: { prompt: 0, result: 0, total: 0 },
      executionTime: 0n,
    },
    {
      ...base(7),
      status: RunStatus.COMPLETED,
      parametersJson: jsonBytes({ x: 1 }),
      resultJson: jsonBytes(42),
    },
    {
      ...base(8),
      status: RunStatus.COMPLETED,
      parametersJson: jsonBytes({ x: 2 }),
      resultJson: jsonBytes(false),
    },
    {
      ...base(9),
      status: RunStatus.COMPLETED,
      parametersJson: jsonBytes({ x: 3 }),
      resultJson: jsonBytes([]),
    },
    {
      ...base(10),
      status: RunStatus.COMPLETED,
      parametersJson: jsonBytes({ x: 4 }),
      resultJson: jsonBytes({}),
    },
  ];
  return runs.map((init) => create(RunSchema, init));
}

/** Writes the runs straight into the store, as the record writer does. */
export async function storeRuns(db: Kysely<RunsDatabase>, runs: Run[]) {
  await writeRecords(
    db,
    runs.map((run, i) => ({ runId: run.id, seq: i + 1, data: toBinary(RunSchema, run) })),
  );
}
