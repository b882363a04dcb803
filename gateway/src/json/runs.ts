import { z } from "zod";
import {
  fromTimestamp,
  jsonBytes,
  jsonOf,
  MIN_MAX_TOKENS,
  PAGE_SIZE,
  promptRefJson,
  restRunJson,
  TEMPERATURE_RANGE,
  toTimestamp,
  type JsonObject,
  type RunErrorFields,
  type RunFields,
} from "@pies/common";
import type { MessageInitShape } from "@bufbuild/protobuf";
import {
  AnchorDirection,
  anchorDirections,
  FacetType,
  RunStatus,
  runStatuses,
  RunStore,
  runStores,
  type Run,
  type RunError,
  type RunFiltersSchema,
  type SearchMeta,
  type SearchRunsRequestSchema,
} from "@pies/proto/runs";
import type { CallerSchema, ExecuteRequest, ExecuteRequestSchema } from "@pies/proto/executor";
import { badRequest } from "../errors.js";
import { compact, jsonObject } from "./common.js";
import {
  int32,
  interactionRef,
  pageQuery,
  shortText,
  shortTextList,
  type InputLimits,
} from "./limits.js";

/** The name of a run's status (SPEC.md); unset reads as created. */
const runStatusName = (s: RunStatus) => runStatuses.name(s) ?? "created";

const errorFields = (e: RunError | undefined): RunErrorFields | undefined =>
  e && { code: e.code, message: e.message, data: jsonOf(e.dataJson) };

/** A run message's fields as restRunJson renders them. */
export function runFields(run: Run): RunFields {
  return {
    id: run.id,
    status: runStatusName(run.status),
    interactionId: run.interactionId,
    interactionName: run.interactionName,
    interactionStatus: run.interactionStatus,
    interactionPrompts: run.interactionStatus
      ? run.interactionPrompts.map((p) => promptRefJson(p.id, p.type, p.templateId, p.chatPath))
      : undefined,
    interactionUpdatedAt: fromTimestamp(run.interactionUpdatedAt),
    environmentId: run.environmentId,
    environmentName: run.environmentName,
    modelId: run.modelId,
    parameters: jsonOf(run.parametersJson) as JsonObject | undefined,
    result: jsonOf(run.resultJson),
    prompt: jsonOf(run.promptJson),
    store: run.store === RunStore.METADATA ? runStores.name(run.store) : undefined,
    tags: run.tags,
    config: run.config && {
      environment: run.config.environmentId,
      model: run.config.model,
      formatter: run.config.formatter,
      temperature: run.config.temperature,
      max_tokens: run.config.maxTokens,
    },
    tokenUse: run.tokenUse,
    executionTime: run.executionTime === undefined ? undefined : Number(run.executionTime),
    error: errorFields(run.error),
    source: run.source && {
      type: run.source.type,
      label: run.source.label,
      principal_type: run.source.principalType,
      principal_id: run.source.principalId,
      client_ip: run.source.clientIp,
    },
    ttl: run.ttl,
    stream: run.stream,
    parentId: run.parentId,
    accountId: run.accountId,
    accountName: run.accountName,
    projectId: run.projectId,
    projectName: run.projectName,
    cached: run.cached,
    cachedFrom: run.cachedFrom,
    cachePolicy: jsonOf(run.cachePolicyJson) as JsonObject | undefined,
    attempts: run.attempts.map((a) => ({
      number: a.number,
      promptAdded: jsonOf(a.promptAddedJson),
      error: errorFields(a.error),
      tokenUse: a.tokenUse,
      environmentId: a.environmentId,
      model: a.model,
      durationMs: a.durationMs,
    })),
    cost: run.cost,
    createdAt: fromTimestamp(run.createdAt),
    updatedAt: fromTimestamp(run.updatedAt),
  };
}

/** A run as JSON, with SPEC.md's field names (the shape @pies/common's restRunJson defines). */
export const runJson = (run: Run) => restRunJson(runFields(run));

/** What the execute routes read of the run an execution answered, and its REST JSON. */
export interface AnsweredRun {
  id: string;
  projectId: string;
  status: RunStatus;
  provider: string;
  modelId: string;
  cost: Run["cost"];
  error: { code: string; message: string } | undefined;
  json(): ReturnType<typeof restRunJson>;
}

export const answeredRun = (run: Run): AnsweredRun => ({
  id: run.id,
  projectId: run.projectId,
  status: run.status,
  provider: run.provider,
  modelId: run.modelId,
  cost: run.cost,
  error: run.error,
  json: () => runJson(run),
});

/** A cache policy of a request (as on an interaction). */
export const cachePolicyBody = (limits: InputLimits) =>
  z.object({
    type: z.enum(["cache", "no_cache", "cache_and_refresh"]),
    ttl: int32(0).optional(),
    varies_on: z.array(shortText(limits)).optional(),
    refresh_probability: z.number().min(0).max(1).optional(),
  });

/** The body of the execute routes (POST /runs, /execute, /interactions/:id/execute). */
export const executeBody = (limits: InputLimits) =>
  z
    .object({
      interaction: interactionRef(limits).optional(),
      interactionId: interactionRef(limits).optional(),
      stream: z.boolean().optional(),
      data: jsonObject.nullish(),
      tags: shortTextList(limits).optional(),
      parent: shortText(limits).optional(),
      config: z
        .object({
          environment: shortText(limits).optional(),
          model: shortText(limits).optional(),
          temperature: z.number().min(TEMPERATURE_RANGE.min).max(TEMPERATURE_RANGE.max).optional(),
          max_tokens: int32(MIN_MAX_TOKENS).optional(),
          formatter: z.union([shortText(limits), z.number()]).optional(),
          cache_policy: cachePolicyBody(limits).optional(),
          max_repairs: z.number().int().min(0).max(5).optional(),
        })
        .passthrough()
        .optional(),
    })
    .passthrough();

export type ExecuteBody = z.infer<ReturnType<typeof executeBody>>;

/** An execute body as an ExecuteRequest for a caller and an interaction. */
export function executeRequest(
  body: ExecuteBody,
  interaction: ExecuteRequest["interaction"],
  caller: MessageInitShape<typeof CallerSchema>,
): MessageInitShape<typeof ExecuteRequestSchema> {
  return { interaction, caller, ...executeFields(body) };
}

/** What an execute body says, in ExecuteRequest's field names, its defaults left undefined. */
function executeFields(body: ExecuteBody) {
  const config = body.config;
  const cachePolicy = config?.cache_policy;
  return {
    stream: body.stream || undefined,
    // Bytes as the body had them would do as well, but fastify has parsed it; one stringify.
    dataJson: body.data ? jsonBytes(body.data) : undefined,
    tags: body.tags?.length ? body.tags : undefined,
    parentRunId: body.parent || undefined,
    config: {
      environmentId: config?.environment || undefined,
      model: config?.model || undefined,
      temperature: config?.temperature,
      maxTokens: config?.max_tokens,
      formatter:
        config?.formatter === undefined ? undefined : String(config.formatter) || undefined,
      maxRepairs: config?.max_repairs,
      cachePolicy: cachePolicy && {
        type: cachePolicy.type,
        ttl: cachePolicy.ttl,
        variesOn: cachePolicy.varies_on?.length ? cachePolicy.varies_on : undefined,
        refreshProbability: cachePolicy.refresh_probability,
      },
    },
  };
}

/** The query of GET /runs, within the limits. */
export const listRunsQuery = (limits: InputLimits) =>
  pageQuery.extend({
    interaction: shortTextList(limits).default([]),
    model: shortTextList(limits).default([]),
    environment: shortTextList(limits).default([]),
    status: z.enum(runStatuses.names).optional(),
    tag: shortTextList(limits).default([]),
    anchorDate: z.string().datetime({ offset: true }).optional(),
    anchorDateDirection: z.enum(anchorDirections.names).default("after"),
    parent: shortText(limits).optional(),
    // @vertesia/client's spelling of parent=false.
    is_root: z.enum(["true", "false"]).optional(),
    // Cost bounds in USD, inclusive.
    min_cost: z.string().min(1).pipe(z.coerce.number().finite().min(0)).optional(),
    max_cost: z.string().min(1).pipe(z.coerce.number().finite().min(0)).optional(),
  });

export function runFilters(
  q: z.infer<ReturnType<typeof listRunsQuery>>,
): MessageInitShape<typeof RunFiltersSchema> {
  return {
    interactionIds: q.interaction,
    models: q.model,
    environmentIds: q.environment,
    status: q.status
      ? (runStatuses.value(q.status) ?? RunStatus.UNSPECIFIED)
      : RunStatus.UNSPECIFIED,
    tags: q.tag,
    topLevelOnly: q.parent === "false" || q.is_root === "true",
    parentId: q.parent && q.parent !== "false" ? q.parent : "",
    anchorDate: toTimestamp(q.anchorDate),
    anchorDirection: anchorDirections.value(q.anchorDateDirection) ?? AnchorDirection.AFTER,
    costAbove: q.min_cost,
    costAboveInclusive: q.min_cost !== undefined,
    costBelow: q.max_cost,
    costBelowInclusive: q.max_cost !== undefined,
  };
}

/**
 * An ISO 8601 date, or date and time with an offset (`Z` or `±hh:mm`), to the millisecond at most
 * (a finer time would be cut, and `gte` at it would answer what it does not ask).
 */
const isoDate = z
  .string()
  .refine(
    (s) =>
      /^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d{1,3})?)?(Z|[+-]\d{2}:?\d{2}))?$/.test(s) &&
      !Number.isNaN(Date.parse(s)),
    "must be an ISO 8601 date (2024-05-01) or date and time with an offset (2024-05-01T12:00:00Z), to the millisecond at most",
  );

/** A facet of POST /runs/search (the service checks the path against the type). */
const facet = (limits: InputLimits) =>
  z.discriminatedUnion(
    "type",
    [
      z.object({
        type: z.literal("string"),
        path: shortText(limits),
        numBuckets: int32(1, 1000).optional(),
      }),
      z.object({
        type: z.literal("number"),
        path: shortText(limits),
        boundaries: z.array(z.number()).min(2, "at least two are required").max(1000),
        default: shortText(limits).optional(),
      }),
      z.object({
        type: z.literal("date"),
        path: shortText(limits),
        boundaries: z.array(isoDate).min(2, "at least two are required").max(1000),
        default: shortText(limits).optional(),
      }),
    ],
    { errorMap: () => ({ message: "type must be string, number or date" }) },
  );

/** A range of `bound`s: one or two of gt/gte/lt/lte, not both of a side. */
const bounds = <T extends z.ZodTypeAny>(bound: T) =>
  z
    .object({
      gt: bound.optional(),
      gte: bound.optional(),
      lt: bound.optional(),
      lte: bound.optional(),
    })
    .strict()
    .refine((r) => Object.keys(r).length > 0, "give at least one of gt, gte, lt, lte")
    .refine((r) => !(r.gt !== undefined && r.gte !== undefined), "give gt or gte, not both")
    .refine((r) => !(r.lt !== undefined && r.lte !== undefined), "give lt or lte, not both");

/** An updated_at range (ISO dates). */
const updatedAtRange = bounds(isoDate);

/** A cost range in USD. */
const costRange = bounds(z.number().finite());

/**
 * A facet as @vertesia/client's current release names one (`{name, field}`): a string facet of that
 * field, every value counted (up to FACET_LIMITS' 1000 buckets). `model` is `modelId`, `tag` `tags`.
 */
const namedFacet = (limits: InputLimits) =>
  z
    .object({ name: shortText(limits).min(1), field: shortText(limits).min(1) })
    .strict()
    .transform(({ name, field }) => ({
      name,
      facet: {
        type: "string" as const,
        path: FIELD_PATHS[field] ?? field,
        numBuckets: NAMED_FACET_BUCKETS,
      },
    }));

/** The buckets a `{name, field}` facet counts at most (the runs service's FACET_LIMITS). */
const NAMED_FACET_BUCKETS = 1000;

/** @vertesia/client's facet fields and filter-option fields, as pies' facet paths. */
const FIELD_PATHS: Record<string, string> = { model: "modelId", tag: "tags" };

/**
 * The object `query` of @vertesia/client's current release (its RunSearchQuery), as far as pies'
 * model has its fields: the run filters, a date range (`start` inclusive, `end` exclusive, on
 * updated_at, as SPEC.md's updated_at filter), and the Lucene string with its default path. Its
 * other keys (exclude_tags, finish_reason, workflow ids, agents…) are a 400 naming them.
 */
const objectQuery = (limits: InputLimits) =>
  z
    .object({
      interaction: shortText(limits).optional(),
      status: z.enum(runStatuses.names).optional(),
      model: shortText(limits).optional(),
      environment: shortText(limits).optional(),
      tags: z.array(shortText(limits)).optional(),
      parent: z.array(shortText(limits)).max(1, "at most one parent run").optional(),
      is_root: z.boolean().optional(),
      start: isoDate.optional(),
      end: isoDate.optional(),
      query: z.string().max(4096).optional(),
      default_query_path: z.string().max(1000).optional(),
      limit: int32(1, PAGE_SIZE.max).optional(),
      offset: int32(0).optional(),
    })
    .strict();

export type ObjectQuery = z.infer<ReturnType<typeof objectQuery>>;

/** Facets as SPEC.md has them (a map of name to facet), or as a list of `{name, field}`. */
const facets = (limits: InputLimits) =>
  z
    .union([z.record(facet(limits)), z.array(namedFacet(limits)).max(20)])
    .transform((f) =>
      Array.isArray(f) ? Object.fromEntries(f.map(({ name, facet }) => [name, facet])) : f,
    );

/**
 * The body of POST /runs/search (SPEC.md); unknown filter keys are an error, not ignored. `query`
 * is SPEC.md's Lucene string, or @vertesia/client's object query (objectQuery).
 */
export const searchRunsBody = (limits: InputLimits) =>
  z
    .object({
      limit: int32(1, PAGE_SIZE.max).optional(),
      offset: int32(0).optional(),
      onlyMeta: z.boolean().optional(),
      exactTotal: z
        .boolean()
        .optional()
        .describe("Count every match for meta.count.total (past 10,000, a lower bound otherwise)"),
      query: z.union([z.string().max(4096), objectQuery(limits)]).optional(),
      defaultQueryPath: z.string().max(1000).optional(),
      facets: facets(limits).optional(),
      filters: z
        .object({
          interaction: shortTextList(limits).optional(),
          environemnt: shortTextList(limits).optional(),
          environment: shortTextList(limits).optional(),
          parent: z.union([shortText(limits), z.literal(false)]).optional(),
          status: z.enum(runStatuses.names).optional(),
          tags: shortTextList(limits).optional(),
          modelId: shortTextList(limits).optional(),
          updated_at: updatedAtRange.optional(),
          cost: costRange.optional(),
        })
        .strict()
        .optional(),
    })
    .passthrough();

export type SearchRunsBody = z.infer<ReturnType<typeof searchRunsBody>>;

const timestampOf = (iso: string | undefined) =>
  iso === undefined ? undefined : timestampOfDate(iso);
const timestampOfDate = (iso: string) => toTimestamp(new Date(Date.parse(iso)));

/**
 * An object query's fields as the filters they are: each alongside `filters` (the same key in
 * both is a 400, rather than one silently winning).
 */
function withObjectQuery(
  filters: NonNullable<SearchRunsBody["filters"]>,
  q: ObjectQuery,
): NonNullable<SearchRunsBody["filters"]> {
  const given: [keyof ObjectQuery, keyof typeof filters, unknown][] = [
    ["interaction", "interaction", q.interaction && [q.interaction]],
    ["status", "status", q.status],
    ["model", "modelId", q.model && [q.model]],
    ["environment", "environment", q.environment && [q.environment]],
    ["tags", "tags", q.tags],
    ["parent", "parent", q.parent?.[0] ?? (q.is_root ? false : undefined)],
    ["start", "updated_at", (q.start ?? q.end) ? { gte: q.start, lt: q.end } : undefined],
  ];
  const out: Record<string, unknown> = { ...filters };
  for (const [key, filter, value] of given) {
    if (value === undefined) continue;
    if (filters[filter] !== undefined || (filter === "environment" && filters.environemnt))
      throw badRequest(`query.${key}: give it in query or as filters.${filter}, not both`);
    out[filter] = value;
  }
  if (q.parent?.length && q.is_root)
    throw badRequest("query.is_root: a run with a parent is not a root run; give one of them");
  return compact(out) as NonNullable<SearchRunsBody["filters"]>;
}

/** A search body as a SearchRunsRequest of a project. */
export function searchRunsRequest(
  body: SearchRunsBody,
  projectId: string,
): MessageInitShape<typeof SearchRunsRequestSchema> {
  const q = typeof body.query === "object" ? body.query : undefined;
  const f = q ? withObjectQuery(body.filters ?? {}, q) : (body.filters ?? {});
  const range = f.updated_at ?? {};
  return {
    projectId,
    limit: body.limit ?? q?.limit ?? 0,
    offset: body.offset ?? q?.offset ?? 0,
    onlyMeta: body.onlyMeta ?? false,
    exactTotal: body.exactTotal ?? false,
    query: (typeof body.query === "string" ? body.query : q?.query) ?? "",
    defaultQueryPath: body.defaultQueryPath ?? q?.default_query_path ?? "",
    facets: Object.fromEntries(
      Object.entries(body.facets ?? {}).map(([name, facet]) => [
        name,
        {
          type:
            facet.type === "string"
              ? FacetType.STRING
              : facet.type === "number"
                ? FacetType.NUMBER
                : FacetType.DATE,
          path: facet.path,
          numBuckets: facet.type === "string" ? (facet.numBuckets ?? 0) : 0,
          numberBoundaries: facet.type === "number" ? facet.boundaries : [],
          dateBoundaries:
            facet.type === "date" ? facet.boundaries.flatMap((d) => timestampOfDate(d) ?? []) : [],
          defaultBucket: facet.type === "string" ? "" : (facet.default ?? ""),
        },
      ]),
    ),
    filters: {
      interactionIds: f.interaction ?? [],
      environmentIds: [...(f.environment ?? []), ...(f.environemnt ?? [])],
      models: f.modelId ?? [],
      status: f.status
        ? (runStatuses.value(f.status) ?? RunStatus.UNSPECIFIED)
        : RunStatus.UNSPECIFIED,
      tags: f.tags ?? [],
      topLevelOnly: f.parent === false,
      parentId: typeof f.parent === "string" ? f.parent : "",
      updatedAfter: timestampOf(range.gt ?? range.gte),
      updatedAfterInclusive: range.gte !== undefined,
      updatedBefore: timestampOf(range.lt ?? range.lte),
      updatedBeforeInclusive: range.lte !== undefined,
      costAbove: f.cost?.gt ?? f.cost?.gte,
      costAboveInclusive: f.cost?.gte !== undefined,
      costBelow: f.cost?.lt ?? f.cost?.lte,
      costBelowInclusive: f.cost?.lte !== undefined,
    },
  };
}

/** A search answer's `meta` as DESIGN.md §3 has it (total, and facets when asked for). */
export function searchMetaJson(body: SearchRunsBody, answered: SearchMeta | undefined) {
  const facets = body.facets ?? {};
  return (
    answered && {
      // Past 10,000 matches counted one by one, a lower bound (@vertesia/client's count).
      count: answered.lowerBound
        ? { lower_bound: Number(answered.total) }
        : { total: Number(answered.total) },
      ...(Object.keys(facets).length > 0 && {
        facet: Object.fromEntries(
          Object.entries(facets).map(([name, facet]) => [
            name,
            {
              buckets: (answered.facets[name]?.buckets ?? []).map((b) => ({
                _id: facet.type === "number" && !b.isDefault ? Number(b.id) : b.id,
                count: Number(b.count),
                // An interaction's or environment's bucket: its name.
                ...(b.name ? { name: b.name } : {}),
              })),
            },
          ]),
        ),
      }),
    }
  );
}

/** The body of POST /runs/facets (@vertesia/client's computeFacets): facets by field, a query. */
export const runFacetsBody = (limits: InputLimits) =>
  z
    .object({
      facets: z.array(namedFacet(limits)).min(1).max(20),
      query: z.union([z.string().max(4096), objectQuery(limits)]).optional(),
    })
    .strict();

/** A facets body as a search body that asks for its meta only. */
export const facetsSearch = (body: z.infer<ReturnType<typeof runFacetsBody>>): SearchRunsBody => ({
  onlyMeta: true,
  // Its answer's total is a number, however large.
  exactTotal: true,
  query: body.query,
  facets: Object.fromEntries(body.facets.map(({ name, facet }) => [name, facet])),
});

/**
 * POST /runs/facets' answer as @vertesia/client reads it: each facet's buckets under its name
 * (`{_id, count, name?}`), and `total`, the runs that match.
 */
export function runFacetsJson(meta: SearchMeta | undefined, names: string[]) {
  return {
    ...Object.fromEntries(
      names.map((name) => [
        name,
        (meta?.facets[name]?.buckets ?? []).map((b) => ({
          _id: b.id,
          count: Number(b.count),
          ...(b.name ? { name: b.name } : {}),
        })),
      ]),
    ),
    total: Number(meta?.total ?? 0),
  };
}

/**
 * GET /runs/filter-options/:field's answer (@vertesia/client's filterOptions): the values the field
 * takes over the runs the filters select, each `{id, name, count}` (name: an interaction's or
 * environment's, else the value).
 */
export const filterOptionsJson = (meta: SearchMeta | undefined, name: string) =>
  (meta?.facets[name]?.buckets ?? []).map((b) => ({
    id: b.id,
    name: b.name || b.id,
    count: Number(b.count),
  }));

/** A filter-option field as a string facet (`model` is `modelId`, `tag` `tags`). */
export const filterOptionFacet = (field: string) => ({
  type: FacetType.STRING,
  path: FIELD_PATHS[field] ?? field,
  numBuckets: NAMED_FACET_BUCKETS,
  numberBoundaries: [],
  dateBoundaries: [],
  defaultBucket: "",
});

/**
 * A search answer's body as DESIGN.md §3 has it: `results` unless onlyMeta, `meta` when asked for.
 * The results are the page as the runs service rendered it (`runs_json`), put in as they are.
 */
export function searchRunsBodyBytes(
  body: SearchRunsBody,
  answer: { runsJson: Uint8Array; meta?: SearchMeta },
): Buffer {
  const meta = searchMetaJson(body, answer.meta);
  const metaJson = meta ? `"meta":${JSON.stringify(meta)}` : "";
  if (body.onlyMeta) return Buffer.from(`{${metaJson}}`);
  return Buffer.concat([
    RESULTS_OPEN,
    answer.runsJson,
    Buffer.from(metaJson ? `,${metaJson}}` : "}"),
  ]);
}

const RESULTS_OPEN = Buffer.from('{"results":');

/** The content type of a body written here rather than by Fastify's serializer (the same). */
export const JSON_CONTENT_TYPE = "application/json; charset=utf-8";
