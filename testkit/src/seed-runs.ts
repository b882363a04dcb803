/**
 * Realistic runs generated straight into a runs store (the `runs.runs` table), for the search
 * tests and the runs bench. The rows are made by PostgreSQL itself (one INSERT … SELECT over
 * generate_series per batch, deterministic from the row number through hashint8), so a million
 * runs cost no client-side work and no bytes on the wire.
 *
 * Run i (0-based, continuing across calls by `from`): project `projects[i % projects.length]`,
 * one of 24 interactions, 3 environments, 6 models (skewed), statuses about 80% completed, 12%
 * failed, 5% processing, 3% created; 0 to 2 of 8 tags; every 10th run a child of an earlier run of
 * its project; created_at and updated_at spread over `spanDays` up to `end`, the id made of the
 * time as pies makes ids (the run lands in its day's partition); input data nested, with text:
 * `{customer: {name, tier, id}, message, lang, priority, items: [{sku, qty}…], channel}`.
 */
export interface SeedRunsOptions {
  /** Runs to write. */
  count: number;
  /** Row number of the first run (to add to an earlier seed). Default 0. */
  from?: number;
  /** Project ids, round robin. Default four: seed-p1…seed-p4. */
  projects?: string[];
  /** Runs per statement (one transaction each). Default 50,000. */
  batchSize?: number;
  /** Latest updated_at. Default now. */
  end?: Date;
  /** Days over which updated_at is spread. Default 90. */
  spanDays?: number;
  /** Called after each batch with the number written so far. */
  onProgress?(written: number): void;
}

/** What seedRuns needs of a client: a parameterised query (pg's Client and Pool both have it). */
export interface Queryable {
  query(text: string, values?: unknown[]): Promise<unknown>;
}

export const SEED_MODELS = [
  "gpt-4o",
  "gpt-4o-mini",
  "claude-3-5-sonnet",
  "llama-3.1-70b",
  "mistral-large",
  "o3-mini",
];
export const SEED_TAGS = ["prod", "staging", "eval", "batch", "chat", "support", "beta", "nightly"];
export const SEED_CUSTOMERS = [
  "Acme",
  "Globex",
  "Initech",
  "Umbrella",
  "Hooli",
  "Stark",
  "Wayne",
  "Wonka",
  "Tyrell",
  "Cyberdyne",
  "Soylent",
  "Aperture",
  "Vandelay",
  "Pied Piper",
  "Dunder Mifflin",
  "Oscorp",
  "Gringotts",
  "Monsters Inc",
  "Nakatomi",
  "Massive Dynamic",
];
const WORDS = [
  "please",
  "summarise",
  "the",
  "invoice",
  "for",
  "order",
  "refund",
  "request",
  "shipping",
  "delay",
  "customer",
  "complaint",
  "about",
  "billing",
  "error",
  "account",
  "password",
  "reset",
  "translate",
  "this",
  "email",
  "into",
  "french",
  "german",
  "spanish",
  "draft",
  "a",
  "reply",
  "to",
  "support",
  "ticket",
  "classify",
  "sentiment",
  "of",
  "review",
  "product",
  "quality",
  "late",
  "delivery",
  "missing",
  "item",
  "upgrade",
  "plan",
  "cancel",
  "subscription",
  "contract",
  "renewal",
  "urgent",
  "question",
  "thanks",
];

const lit = (values: string[]) =>
  `array[${values.map((v) => `'${v.replace(/'/g, "''")}'`).join(",")}]::text[]`;

/** h(k): a deterministic non-negative pseudo-random integer of the row number and a salt k. */
const h = (k: number) => `abs(hashint8(i * 1000 + ${k})::bigint)`;

function statement(projects: string[]): string {
  const P = projects.length;
  const words = lit(WORDS);
  const message = [0, 1, 2, 3, 4, 5, 6, 7]
    .map((k) => `(${words})[1 + ${h(20 + k)} % ${WORDS.length}]`)
    .join(" || ' ' || ");
  // Skewed models: the first ones more often (index = floor(6 * u^2)).
  const model = `(${lit(SEED_MODELS)})[1 + floor(${SEED_MODELS.length} * power((${h(2)} % 1000) / 1000.0, 2))::int]`;
  const statusU = `(${h(3)} % 100)`;
  const status = `case when ${statusU} < 80 then 'completed' when ${statusU} < 92 then 'failed'
    when ${statusU} < 97 then 'processing' else 'created' end`;
  const tags = `(select coalesce(array_agg(t), '{}') from unnest(${lit(SEED_TAGS)}) with ordinality as x(t, n)
    where n = 1 + ${h(4)} % 12 or n = 1 + ${h(5)} % 16)`;
  // Run i's time, and its id as pies makes them (ids.ts newId): 12 hex digits of that time in ms,
  // then (in place of random ones) 12 of i, so that the runs land in their day's partition.
  const at = (i: string) =>
    `($4::timestamptz - make_interval(secs => ($3::bigint - 1 - (${i})) * $5::double precision))`;
  const id = (i: string) =>
    `lpad(to_hex(floor(extract(epoch from ${at(i)}) * 1000)::bigint), 12, '0') || lpad(to_hex(${i}), 12, '0')`;
  return `
  with g as (
    select i, ${statusU} as su, ${at("i")} as at
    from generate_series($1::bigint, $2::bigint) as i
  )
  insert into runs.runs (id, project_id, account_id, interaction_id, interaction_name,
    environment_id, environment_name, provider, model_id, status, stream, parameters, result,
    tags, config, source, prompt_tokens, result_tokens, total_tokens, execution_time, error, ttl,
    parent_id, created_at, updated_at, heartbeat_at)
  select ${id("i")}, (${lit(projects)})[1 + i % ${P}], 'seed-account',
    'int-' || ${h(1)} % 24, 'Interaction ' || ${h(1)} % 24,
    'env-' || ${h(6)} % 3, 'Environment ' || ${h(6)} % 3, 'openai', ${model}, ${status},
    ${h(7)} % 4 = 0,
    jsonb_build_object(
      'customer', jsonb_build_object('name', (${lit(SEED_CUSTOMERS)})[1 + ${h(8)} % ${SEED_CUSTOMERS.length}],
        'tier', (array['free','pro','enterprise'])[1 + ${h(9)} % 3], 'id', ${h(10)} % 100000),
      'message', ${message},
      'lang', (array['en','fr','de','es','it'])[1 + ${h(11)} % 5],
      'priority', ${h(12)} % 5,
      'items', jsonb_build_array(
        jsonb_build_object('sku', 'sku-' || ${h(13)} % 500, 'qty', 1 + ${h(14)} % 9),
        jsonb_build_object('sku', 'sku-' || ${h(15)} % 500, 'qty', 1 + ${h(16)} % 9)),
      'channel', (array['web','email','api','chat'])[1 + ${h(17)} % 4]),
    case when su < 80 then jsonb_build_object('text', 'Answer ' || i) end,
    ${tags},
    jsonb_build_object('environment', 'env-' || ${h(6)} % 3, 'model', ${model}, 'formatter', ''),
    '{"type":"api","label":"seed","principal_type":"apikey","principal_id":"seed","client_ip":"127.0.0.1"}'::jsonb,
    case when su < 97 then 50 + ${h(18)} % 2000 end,
    case when su < 80 then 20 + ${h(19)} % 800 end,
    case when su < 97 then 70 + ${h(18)} % 2000 + ${h(19)} % 800 end,
    case when su < 97 then 100 + ${h(30)} % 9000 end,
    case when su >= 80 and su < 92 then '{"code":"provider_error","message":"upstream failed"}'::jsonb end,
    0,
    case when i % 10 = 9 and i >= ${P * 10} then ${id(`i - ${P} * (1 + ${h(31)} % 10)`)} end,
    at, at, at
  from g`;
}

/** Writes `count` generated runs; returns how long it took in milliseconds. */
export async function seedRuns(db: Queryable, options: SeedRunsOptions): Promise<number> {
  const started = performance.now();
  const projects = options.projects ?? ["seed-p1", "seed-p2", "seed-p3", "seed-p4"];
  if (projects.some((p) => !/^[\w.-]+$/.test(p))) throw new Error("project ids: word characters");
  const from = options.from ?? 0;
  const total = from + options.count;
  const batch = options.batchSize ?? 50_000;
  const end = options.end ?? new Date();
  // Seconds between two consecutive runs, so that the whole seed spans spanDays.
  const step = ((options.spanDays ?? 90) * 86_400) / Math.max(1, total);
  const text = statement(projects);
  for (let start = from; start < total; start += batch) {
    const last = Math.min(total, start + batch) - 1;
    await db.query(text, [start, last, total, end.toISOString(), step]);
    options.onProgress?.(last + 1 - from);
  }
  return performance.now() - started;
}
