import {
  sql,
  type AliasedRawBuilder,
  type Compilable,
  type Kysely,
  type RawBuilder,
  type SelectQueryBuilder,
} from "kysely";
import { fromTimestamp, invalid, pageSize } from "@pies/common";
import {
  AnchorDirection,
  FacetType,
  RunStatus,
  type Facet,
  type SearchRunsRequest,
} from "@pies/proto/runs";
import { indexState } from "@pies/common/db";
import { applyFilters, idBounds } from "./filters.js";
import { exprToSql, parseQuery } from "./lucene.js";
import { statusName } from "./mappers.js";
import type { RunsDatabase } from "./tables.js";

/** Bounds on one search's facets (DESIGN.md §3), so that a request's cost stays bounded. */
export const FACET_LIMITS = { facets: 20, numBuckets: 1000, boundaries: 1000, nameLength: 100 };
const DEFAULT_NUM_BUCKETS = 10;

/**
 * The facet paths SPEC.md allows, each with the one facet type it takes and its column; and the
 * interaction and environment (by id, their buckets named: @vertesia/client's run facets).
 */
const FACET_PATHS = {
  interaction: { type: FacetType.STRING, column: "interaction_id" },
  environment: { type: FacetType.STRING, column: "environment_id" },
  modelId: { type: FacetType.STRING, column: "model_id" },
  status: { type: FacetType.STRING, column: "status" },
  tags: { type: FacetType.STRING, column: "tags" },
  updated_at: { type: FacetType.DATE, column: "updated_at" },
  execution_time: { type: FacetType.NUMBER, column: "execution_time" },
  cost: { type: FacetType.NUMBER, column: "cost_total" },
} as const;
type FacetPath = keyof typeof FACET_PATHS;
type StringPath = "interaction" | "environment" | "modelId" | "status" | "tags";
type RangePath = "updated_at" | "execution_time" | "cost";

/** The facets whose buckets are named, and the column of the name (namedBuckets). */
export const NAMED_FACETS = {
  interaction: { id: "interaction_id", name: "interaction_name" },
  environment: { id: "environment_id", name: "environment_name" },
} as const;

const typeName = (t: FacetType) =>
  ({ [FacetType.STRING]: "string", [FacetType.NUMBER]: "number", [FacetType.DATE]: "date" })[
    t as 1 | 2 | 3
  ] ?? "unspecified";

/** A validated facet: what to group by and how to name its buckets. */
export type FacetPlan =
  | { name: string; kind: "string"; path: StringPath; numBuckets: number }
  | {
      name: string;
      kind: "range";
      path: RangePath;
      /** Bucket ids: the lower boundary of each adjacent pair (ISO string or number). */
      ids: (string | number)[];
      /** The boundaries as SQL sees them (ISO strings or numbers). */
      boundaries: (string | number)[];
      defaultBucket?: string;
    };

/** Checks a facet (INVALID_ARGUMENT saying what is wrong) and plans it. */
export function planFacet(name: string, facet: Facet): FacetPlan {
  const what = `facets.${name}`;
  if (name === "" || name.length > FACET_LIMITS.nameLength) {
    throw invalid(`facets: a facet name is 1 to ${FACET_LIMITS.nameLength} characters`);
  }
  const allowed = FACET_PATHS[facet.path as FacetPath];
  if (!Object.hasOwn(FACET_PATHS, facet.path) || !allowed) {
    throw invalid(
      `${what}.path: "${facet.path}" is not a facet path (one of ${Object.keys(FACET_PATHS).join(", ")})`,
    );
  }
  const path = facet.path as FacetPath;
  if (facet.type !== allowed.type) {
    throw invalid(
      `${what}.type: ${path} is a ${typeName(allowed.type)} facet, not ${typeName(facet.type)}`,
    );
  }
  if (allowed.type === FacetType.STRING) {
    const numBuckets = facet.numBuckets === 0 ? DEFAULT_NUM_BUCKETS : facet.numBuckets;
    if (numBuckets < 1 || numBuckets > FACET_LIMITS.numBuckets) {
      throw invalid(`${what}.numBuckets: must be 1 to ${FACET_LIMITS.numBuckets}`);
    }
    return { name, kind: "string", path: path as StringPath, numBuckets };
  }
  const values: number[] =
    allowed.type === FacetType.DATE
      ? facet.dateBoundaries.map((t) => fromTimestamp(t)?.getTime() ?? Number.NaN)
      : facet.numberBoundaries;
  if (values.length < 2) throw invalid(`${what}.boundaries: at least two are required`);
  if (values.length > FACET_LIMITS.boundaries) {
    throw invalid(`${what}.boundaries: at most ${FACET_LIMITS.boundaries}`);
  }
  values.forEach((v, i) => {
    if (!Number.isFinite(v)) throw invalid(`${what}.boundaries[${i}]: not a finite value`);
    if (i > 0 && !(v > (values[i - 1] ?? Number.NaN))) {
      throw invalid(`${what}.boundaries: must be in strictly ascending order (entry ${i})`);
    }
  });
  const boundaries =
    allowed.type === FacetType.DATE ? values.map((v) => new Date(v).toISOString()) : values;
  return {
    name,
    kind: "range",
    path: path as RangePath,
    ids: boundaries.slice(0, -1),
    boundaries,
    ...(facet.defaultBucket ? { defaultBucket: facet.defaultBucket } : {}),
  };
}

export interface Bucket {
  id: string | number;
  count: number;
  isDefault?: boolean;
}

/**
 * The names of an interaction or environment facet's buckets, as the latest run of each has them:
 * one statement for all the buckets, each name one step down the (project, id, updated_at) index.
 */
export async function bucketNames(
  db: Kysely<RunsDatabase>,
  projectId: string,
  path: keyof typeof NAMED_FACETS,
  ids: string[],
): Promise<Map<string, string>> {
  if (ids.length === 0) return new Map();
  const { id, name } = NAMED_FACETS[path];
  const named = await sql<{ id: string; name: string | null }>`
    select b.id, (
      select ${sql.ref(`r.${name}`)} from runs.runs as r
      where r.project_id = ${projectId} and ${sql.ref(`r.${id}`)} = b.id
      order by r.updated_at desc, r.id desc limit 1
    ) as name
    from unnest(${ids}::text[]) as b(id)`.execute(db);
  return new Map(named.rows.map((r) => [r.id, r.name ?? ""]));
}

/** The top `n` values by count, ties by value in JavaScript string order (UTF-16 code units; DESIGN.md §3). */
export function topBuckets(counts: Map<string, number>, n: number): Bucket[] {
  return [...counts]
    .sort(([a, x], [b, y]) => y - x || (a < b ? -1 : a > b ? 1 : 0))
    .slice(0, n)
    .map(([id, count]) => ({ id, count }));
}

/**
 * Range buckets from counts by width_bucket index (0: below the first boundary, n: at or above
 * the last, null: no value): every pair's bucket, empty ones too, then the default bucket when
 * one is named.
 */
export function rangeBuckets(
  plan: Extract<FacetPlan, { kind: "range" }>,
  byIndex: Map<number | null, number>,
) {
  const buckets: Bucket[] = plan.ids.map((id, i) => ({ id, count: byIndex.get(i + 1) ?? 0 }));
  if (plan.defaultBucket !== undefined) {
    let outside = 0;
    for (const [index, count] of byIndex) {
      if (index === null || index < 1 || index > plan.ids.length) outside += count;
    }
    buckets.push({ id: plan.defaultBucket, count: outside, isDefault: true });
  }
  return buckets;
}

type Base = SelectQueryBuilder<RunsDatabase, "runs.runs", object>;

/**
 * The runs a search matches: `filtered`, its project and filters, and `condition`, its query
 * (null without one), parsed once. `where` adds the query's SQL, with trigram `patterns` when the
 * trigram index is there (see textPatterns).
 */
export function searchParts(
  db: Kysely<RunsDatabase>,
  projectId: string,
  req: Pick<SearchRunsRequest, "query" | "defaultQueryPath" | "filters">,
) {
  const condition = parseQuery(req.query, req.defaultQueryPath || undefined);
  const filtered = applyFilters(
    db.selectFrom("runs.runs").where("project_id", "=", projectId) as Base,
    req.filters,
  );
  return {
    filtered,
    condition,
    where: (base: Base, options: { patterns: boolean }) =>
      condition ? base.where(exprToSql(condition, options)) : base,
  };
}

/** The trigram index of the input data's strings (migrations/index-builds.ts). */
export const TRIGRAM_INDEX = "runs_project_strings_trgm_idx";

/**
 * Whether an index of the runs schema is there and valid, looked up at most once per `ttlMs`
 * (it appears once its concurrent build ends, and never where its extension is missing). A
 * failed look-up answers false until the next.
 */
export function indexPresence(db: Kysely<RunsDatabase>, name: string, ttlMs: number) {
  let known: { present: boolean; at: number } | undefined;
  let pending: Promise<boolean> | undefined;
  const lookUp = async () => {
    try {
      const { rows } = await indexState("runs", name).execute(db);
      return rows[0]?.valid === true;
    } catch {
      return false;
    }
  };
  return async (): Promise<boolean> => {
    if (known && performance.now() - known.at < ttlMs) return known.present;
    pending ??= lookUp().then((present) => {
      known = { present, at: performance.now() };
      pending = undefined;
      return present;
    });
    return pending;
  };
}

/** SQL of the value a range facet groups by: its width_bucket index (null when no value). */
function bucketIndex(plan: Extract<FacetPlan, { kind: "range" }>): RawBuilder<number | null> {
  if (plan.path === "updated_at") {
    return sql`width_bucket(updated_at, ${plan.boundaries as string[]}::timestamptz[])`;
  }
  const column = sql.ref(FACET_PATHS[plan.path].column);
  return sql`width_bucket(${column}::float8, ${plan.boundaries as number[]}::float8[])`;
}

/** A facet other than tags: counted by the one grouping statement. */
type KeyedPlan = Exclude<FacetPlan, { path: "tags" }>;
type StringPlan = Extract<FacetPlan, { kind: "string" }>;

/**
 * The total and the buckets of every facet but tags in one statement: `rows` selects the
 * expressions each facet groups by (given, aliased) from the matches, with `weight` the number of
 * runs one row stands for (`count(*)` over runs, `sum(n)` over counted rows). GROUPING SETS: one
 * row per value of each facet, plus the total, whatever the combinations.
 */
async function groupedCounts(
  db: Kysely<RunsDatabase>,
  plans: KeyedPlan[],
  rows: (selected: AliasedRawBuilder<unknown, string>[]) => RawBuilder<unknown> | Compilable,
  weight: RawBuilder<unknown>,
) {
  // Facets that group by the same thing share a column.
  const expressions = new Map<string, RawBuilder<unknown>>();
  const keyOf = (p: KeyedPlan) =>
    p.kind === "range" ? `${p.path}:${p.boundaries.join(",")}` : p.path;
  for (const p of plans) {
    if (expressions.has(keyOf(p))) continue;
    expressions.set(
      keyOf(p),
      p.kind === "range" ? bucketIndex(p) : sql.ref(FACET_PATHS[p.path].column),
    );
  }
  const keys = [...expressions.keys()];
  const selected = [...expressions.values()].map((e, i) => e.as(`k${i}`));
  const cols = keys.map((_, i) => sql.raw(`k${i}`));
  const flags = keys.map((_, i) => sql`grouping(${sql.raw(`k${i}`)}) as ${sql.raw(`g${i}`)}`);
  const grouped = await sql<Record<string, unknown> & { n: string | number | null }>`
    select ${keys.length ? sql`${sql.join(cols)}, ${sql.join(flags)},` : sql``} ${weight} as n
    from (${rows(selected)}) as s
    ${
      keys.length
        ? sql`group by grouping sets (${sql.join([...cols.map((c) => sql`(${c})`), sql`()`])})`
        : sql``
    }`.execute(db);
  let total = 0;
  const counts = keys.map(() => new Map<unknown, number>());
  for (const row of grouped.rows) {
    const n = Number(row.n ?? 0);
    // The row of one grouping set: the facet whose column it groups by (grouping() = 0), or
    // none (the empty set: the total).
    const i = keys.findIndex((_, j) => Number(row[`g${j}`]) === 0);
    if (i < 0) total = n;
    else counts[i]?.set(row[`k${i}`] ?? null, n);
  }
  const result: Record<string, Bucket[]> = {};
  for (const p of plans) {
    const c = counts[keys.indexOf(keyOf(p))] ?? new Map<unknown, number>();
    result[p.name] =
      p.kind === "string"
        ? topBuckets(c as Map<string, number>, p.numBuckets)
        : rangeBuckets(p, c as Map<number | null, number>);
  }
  return { total, facets: result };
}

/**
 * The tags facets, over the matches of `base`. The tags, one run to many, have a query of their
 * own, which keeps only the most frequent in SQL: a project may have any number of distinct tags.
 */
async function tagFacets(db: Kysely<RunsDatabase>, base: Base, plans: StringPlan[]) {
  const result: Record<string, Bucket[]> = {};
  if (plans.length === 0) return result;
  // The most frequent first, ties in byte order of the tag (code point order); one more than
  // asked, so that topBuckets breaks no tie differently from here.
  const keep = Math.max(...plans.map((p) => p.numBuckets)) + 1;
  const tagged = await sql<{ t: string; n: string | number }>`
    select t, count(*) as n from (${base.select("tags")}) as s
    cross join lateral (select distinct unnest(s.tags) as t) as x
    group by t order by n desc, t collate "C" limit ${keep}`.execute(db);
  const tagCounts = new Map(tagged.rows.map((r) => [r.t, Number(r.n)]));
  for (const p of plans) result[p.name] = topBuckets(tagCounts, p.numBuckets);
  return result;
}

const isKeyed = (p: FacetPlan): p is KeyedPlan => p.path !== "tags";
const isTags = (p: FacetPlan): p is StringPlan => p.path === "tags";

/** Matches counted for a total over the runs, past which it is a lower bound (facetMeta). */
export const TOTAL_EXACT_UP_TO = 10_000;

/**
 * The total and every facet's buckets, over all the runs that match (not the page). One scan
 * counts the matches by each facet but tags (the covering index serves it without reading the
 * table); the tags have a query of their own (tagFacets). Without a facet that needs every match
 * (but tags) nor `exactTotal`, the total is counted up to TOTAL_EXACT_UP_TO and a lower bound past it.
 */
export async function facetMeta(
  db: Kysely<RunsDatabase>,
  base: Base,
  plans: FacetPlan[],
  options: { exactTotal?: boolean } = {},
): Promise<{ total: number; lowerBound?: boolean; facets: Record<string, Bucket[]> }> {
  const keyed = plans.filter(isKeyed);
  if (keyed.length === 0 && !options.exactTotal) {
    // No facet counts every match: the total stops one past TOTAL_EXACT_UP_TO, as search engines'
    // do (a common term's total would read every match of the project, which grows with it).
    const { rows } = await sql<{ n: string | number }>`
      select count(*) as n from (${base.select(sql<number>`1`.as("one")).limit(TOTAL_EXACT_UP_TO + 1)}) as m`.execute(
      db,
    );
    const n = Number(rows[0]?.n ?? 0);
    const tags = await tagFacets(db, base, plans.filter(isTags));
    return n > TOTAL_EXACT_UP_TO
      ? { total: TOTAL_EXACT_UP_TO, lowerBound: true, facets: tags }
      : { total: n, facets: tags };
  }
  const { total, facets } = await groupedCounts(
    db,
    plans.filter(isKeyed),
    (selected) => base.select(selected.length ? selected : [sql<number>`1`.as("one")]),
    sql`count(*)`,
  );
  return { total, facets: { ...facets, ...(await tagFacets(db, base, plans.filter(isTags))) } };
}

const HOUR_MS = 3_600_000;
const DAY_MS = 24 * HOUR_MS;
/** The start of the bucket of `width` ms that holds `ms` (hours and days in UTC). */
const bucketOf = (ms: number, width: number) => Math.floor(ms / width) * width;

/**
 * How the rollup answers a search's meta: which days and hours some updated_at bound or date
 * boundary cuts, and the bounds on the buckets counted whole.
 */
export interface RollupPlan {
  /** Starts (ms) of the days something cuts: counted by their hours. */
  partialDays: number[];
  /** Starts (ms) of the hours something cuts: counted from runs.runs. */
  partialHours: number[];
  /** Lower bounds: a whole bucket starts at or after (inclusive), or after, each. */
  lower: { ms: number; inclusive: boolean }[];
  /** Upper bounds: a whole bucket ends at or before each. */
  upper: number[];
  status?: string;
  models: string[];
  topLevelOnly: boolean;
}

/** The most hours a search may cut (bounds and boundaries inside them) and use the rollup. */
export const MAX_ROLLUP_CUT_HOURS = 200;

/**
 * Whether the rollup (runs.run_rollups) can answer this search's total and facets, and how: no
 * query; only filters its key covers (status, models, top level only, updated_at bounds); facets
 * on status, modelId, updated_at (and tags, counted over the runs as ever). Undefined otherwise.
 *
 * A whole day (or hour) lies on one side of every bound and in one bucket of every date facet
 * unless a bound or a boundary falls inside it, or on its start for a bound that leaves out the
 * value itself from the runs above it (gt, lte): such a day is counted by its hours, and such an
 * hour run by run. An hour cut is in a day cut.
 */
export function planRollup(req: SearchRunsRequest, plans: FacetPlan[]): RollupPlan | undefined {
  if (req.query.trim() !== "") return undefined;
  // The rollup counts by status, model and hour: nothing else.
  if (
    plans.some(
      (p) =>
        p.path === "execution_time" || p.path === "cost" || Object.hasOwn(NAMED_FACETS, p.path),
    )
  )
    return undefined;
  const f = req.filters;
  if (
    f &&
    (f.interactionIds.length > 0 ||
      f.environmentIds.length > 0 ||
      f.tags.length > 0 ||
      f.parentId !== "" ||
      f.costAbove !== undefined ||
      f.costBelow !== undefined)
  ) {
    return undefined;
  }
  const days = new Set<number>();
  const hours = new Set<number>();
  /** A value that cuts the day and hour it is in, but not one it starts unless `atStart`. */
  const cut = (ms: number, atStart: boolean) => {
    for (const [width, set] of [
      [DAY_MS, days],
      [HOUR_MS, hours],
    ] as const) {
      if (atStart || ms !== bucketOf(ms, width)) set.add(bucketOf(ms, width));
    }
  };
  for (const p of plans) {
    // A run equal to a boundary lands in the upper bucket: a boundary cuts no bucket it starts.
    if (p.kind === "range") for (const b of p.boundaries) cut(Date.parse(String(b)), false);
  }
  const lower: RollupPlan["lower"] = [];
  const upper: number[] = [];
  const above = (d: Date, inclusive: boolean) => {
    cut(d.getTime(), !inclusive);
    lower.push({ ms: d.getTime(), inclusive });
  };
  const below = (d: Date, inclusive: boolean) => {
    cut(d.getTime(), inclusive);
    upper.push(d.getTime());
  };
  const anchor = fromTimestamp(f?.anchorDate);
  if (anchor) {
    if (f?.anchorDirection === AnchorDirection.BEFORE) below(anchor, false);
    else above(anchor, false);
  }
  const after = fromTimestamp(f?.updatedAfter);
  if (after) above(after, f?.updatedAfterInclusive ?? false);
  const before = fromTimestamp(f?.updatedBefore);
  if (before) below(before, f?.updatedBeforeInclusive ?? false);
  // Each hour cut is read run by run, and each day cut hour by hour: past this, counting over the
  // runs costs less (up to 20 date facets of 1,000 boundaries are allowed).
  if (hours.size > MAX_ROLLUP_CUT_HOURS) return undefined;
  const sorted = (set: Set<number>) => [...set].sort((a, b) => a - b);
  return {
    partialDays: sorted(days),
    partialHours: sorted(hours),
    lower,
    upper,
    ...(f && f.status !== RunStatus.UNSPECIFIED ? { status: statusName(f.status) } : {}),
    models: f?.models ?? [],
    topLevelOnly: f?.topLevelOnly ?? false,
  };
}

const instants = (ms: number[]) => sql`${ms.map((v) => new Date(v).toISOString())}::timestamptz[]`;

/**
 * The total and facets of `planRollup`'s searches in one statement (one snapshot), as rows of
 * status, model and updated_at with the number of runs each stands for: the rollup's days the
 * search covers whole; within the days it cuts, the rollup's hours it covers whole; and the runs
 * of the hours it cuts (an index range scan of (project_id, updated_at) per hour, with the
 * filters). A whole bucket's updated_at is its start: in the same facet bucket as each of its runs.
 * Tags facets are counted over the runs, as by facetMeta.
 */
export async function rollupMeta(
  db: Kysely<RunsDatabase>,
  projectId: string,
  filtered: Base,
  rollup: RollupPlan,
  plans: FacetPlan[],
) {
  /** Which rows of a rollup stand for buckets `width` ms wide that the filters keep whole. */
  const wholeBuckets = (width: number, only: { not?: number[]; in?: number[] }) => {
    const c: RawBuilder<boolean>[] = [
      sql`project_id = ${projectId}`,
      sql`hours = ${width / HOUR_MS}`,
      sql`n > 0`,
    ];
    if (rollup.status !== undefined) c.push(sql`status = ${rollup.status}`);
    if (rollup.models.length > 0) c.push(sql`model_id = any(${rollup.models}::text[])`);
    if (rollup.topLevelOnly) c.push(sql`top_level`);
    for (const b of rollup.lower) {
      c.push(sql`bucket ${sql.raw(b.inclusive ? ">=" : ">")} ${new Date(b.ms)}`);
    }
    for (const u of rollup.upper) c.push(sql`bucket <= ${new Date(u - width)}`);
    if (only.not?.length) c.push(sql`bucket <> all(${instants(only.not)})`);
    if (only.in) c.push(sql`bucket = any(${instants(only.in)})`);
    return sql.join(c, sql` and `);
  };
  // The hours of the days cut, bar the hours cut: looked up by key (an index scan with the list,
  // whatever the table's statistics say).
  const cutHours = new Set(rollup.partialHours);
  const wholeHours = rollup.partialDays.flatMap((day) =>
    Array.from({ length: 24 }, (_, h) => day + h * HOUR_MS).filter((h) => !cutHours.has(h)),
  );
  /**
   * `from` the runs of the hours cut (`r`: their status, model, updated_at and tags): a statement
   * for each hour, bounded by its own instants, so that each reads only the partitions that may
   * hold its runs (pruned when planned; one statement over all the hours would read the partitions
   * from the first to the last).
   */
  const runsOfCutHours = () => {
    const hours = rollup.partialHours.map((hour) => {
      let runsOfHour = filtered
        .select(["status", "model_id", "updated_at", "tags"])
        .where("updated_at", ">=", new Date(hour))
        .where("updated_at", "<", new Date(hour + HOUR_MS));
      for (const b of idBounds(new Date(hour), new Date(hour + HOUR_MS))) {
        runsOfHour = runsOfHour.where(b);
      }
      return sql`${runsOfHour}`;
    });
    return sql`from (${sql.join(hours, sql` union all `)}) as r`;
  };
  /** The rows of a rollup (`select`, from `table`) and of the runs of the hours cut (`fromRuns`). */
  const rolled = (table: string, select: string, fromRuns: () => RawBuilder<unknown>) => {
    const from = sql.raw(`select ${select} from runs.${table} where `);
    const parts = [sql`${from}${wholeBuckets(DAY_MS, { not: rollup.partialDays })}`];
    if (wholeHours.length > 0) {
      parts.push(sql`${from}${wholeBuckets(HOUR_MS, { in: wholeHours })}`);
    }
    if (rollup.partialHours.length > 0) parts.push(fromRuns());
    return sql.join(parts, sql` union all `);
  };
  const union = rolled(
    "run_rollups",
    "status, model_id, bucket as updated_at, n",
    () => sql`select r.status, r.model_id, r.updated_at, 1::bigint as n ${runsOfCutHours()}`,
  );
  const { total, facets } = await groupedCounts(
    db,
    plans.filter(isKeyed),
    (selected) =>
      sql`select ${selected.length ? sql`${sql.join(selected)},` : sql``} n from (${union}) as u`,
    sql`sum(n)`,
  );
  const tagPlans = plans.filter(isTags);
  if (tagPlans.length === 0) return { total, facets };
  // The tag rollup has no model in its key: with a model filter, the tags are counted over the runs.
  if (rollup.models.length > 0) {
    return { total, facets: { ...facets, ...(await tagFacets(db, filtered, tagPlans)) } };
  }
  // The tags from their rollup, as tagFacets counts them over the runs (a run's tag once).
  const tags = rolled(
    "run_tag_rollups",
    "tag, n",
    () => sql`select t.tag, 1::bigint as n ${runsOfCutHours()}
      cross join lateral (select distinct unnest(r.tags) as tag) as t`,
  );
  const keep = Math.max(...tagPlans.map((p) => p.numBuckets)) + 1;
  const tagged = await sql<{ tag: string; n: string | number }>`
    select tag, sum(n) as n from (${tags}) as u group by tag having sum(n) > 0
    order by n desc, tag collate "C" limit ${keep}`.execute(db);
  const tagCounts = new Map(tagged.rows.map((r) => [r.tag, Number(r.n)]));
  const tagFacetsOf = Object.fromEntries(
    tagPlans.map((p) => [p.name, topBuckets(tagCounts, p.numBuckets)]),
  );
  return { total, facets: { ...facets, ...tagFacetsOf } };
}

/** The deepest page a search serves. */
export const MAX_OFFSET = 10_000;

/** Plans the facets of a request, checking the paging and facet count too. */
export function planSearch(req: SearchRunsRequest) {
  if (req.limit < 0) throw invalid("limit: must be 1 to 1000");
  if (req.offset < 0) throw invalid("offset: must not be negative");
  // Deep pages cost a scan of everything before them: past this, narrow the search instead.
  if (req.offset > MAX_OFFSET) {
    throw invalid(`offset: at most ${MAX_OFFSET}; narrow the search with filters or the query`);
  }
  const names = Object.keys(req.facets);
  if (names.length > FACET_LIMITS.facets) {
    throw invalid(`facets: at most ${FACET_LIMITS.facets}`);
  }
  return {
    limit: pageSize(req.limit),
    plans: Object.entries(req.facets).map(([name, facet]) => planFacet(name, facet)),
  };
}
