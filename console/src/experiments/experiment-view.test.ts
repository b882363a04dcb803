import { describe, expect, it } from "vitest";
import type { InteractionRef } from "../interactions/model";
import { parseView } from "../runs/runs-view";
import {
  changedCount,
  comparisonRows,
  defaultTarget,
  describeSource,
  describeView,
  experimentBody,
  formErrors,
  fresher,
  interactionNames,
  pairOutcome,
  progressParts,
  progressText,
  sourceLink,
  targetChoices,
  type ExperimentForm,
} from "./experiment-view";
import type { Comparison, ExperimentSummary, Pair, Progress } from "./model";

const form: ExperimentForm = {
  name: "  shorter prompt ",
  target: "Greeting@draft",
  environment: "",
  model: "",
  temperature: "",
  maxTokens: "",
  judge: "",
  concurrency: "4",
  limit: "100",
};

const ref = (id: string, name: string, status: string, version?: number) =>
  ({ id, name, status, version, prompts: [] }) as unknown as InteractionRef;

describe("a new experiment from the runs page's search", () => {
  const now = Date.parse("2026-12-07T12:00:00Z");

  it("takes the view's query and filters as its source, a relative range fixed at the start", () => {
    const view = parseView("?q=name:Ada&status=completed&tags=a,b&range=24h&min_cost=0.5&page=3");
    expect(experimentBody(form, view, now)).toEqual({
      name: "shorter prompt",
      source: {
        query: "name:Ada",
        filters: {
          status: "completed",
          tags: ["a", "b"],
          updated_at: { gte: "2026-12-06T12:00:00.000Z" },
          cost: { gte: 0.5, lte: undefined },
        },
        limit: 100,
      },
      target: { interaction: "Greeting@draft", config: undefined },
      judge: undefined,
      concurrency: 4,
    });
  });

  it("overrides only the settings given, and sends a judge", () => {
    const body = experimentBody(
      {
        ...form,
        environment: "env1",
        model: " test-slow ",
        temperature: "0.2",
        maxTokens: "",
        judge: "Judge@latest",
        concurrency: "",
        limit: "1000",
      },
      parseView(""),
      now,
    );
    expect(body.source).toEqual({ query: undefined, filters: undefined, limit: 1000 });
    expect(body.target).toEqual({
      interaction: "Greeting@draft",
      config: { environment: "env1", model: "test-slow", temperature: 0.2 },
    });
    expect(body.judge).toBe("Judge@latest");
    expect(body.concurrency).toBeUndefined();
  });

  it("puts the API's errors at the fields they name", () => {
    expect(
      formErrors(
        {
          message: "name: String must contain at least 1 character(s)",
          details: {
            issues: [
              { path: "name", message: "String must contain at least 1 character(s)" },
              { path: "source.limit", message: "must be an integer from 1 to 1000" },
              { path: "target.config.temperature", message: "too hot" },
              { path: "source.filters.status", message: "not a status" },
            ],
          },
        },
        400,
      ),
    ).toEqual({
      fields: {
        name: "String must contain at least 1 character(s)",
        limit: "must be an integer from 1 to 1000",
        temperature: "too hot",
      },
      message: "source.filters.status: not a status",
    });
    expect(
      formErrors({ message: "judge: its result schema must give `score` the type number" }, 400),
    ).toEqual({ fields: { judge: "its result schema must give `score` the type number" } });
    expect(formErrors({ message: "interaction Nope@draft not found" }, 404)).toEqual({
      fields: { target: "interaction Nope@draft not found" },
    });
    // A query that does not parse belongs to the search, above the form.
    expect(
      formErrors({ message: "query: syntax error: unexpected end of query at position 6" }, 400),
    ).toEqual({
      fields: {},
      message: "query: syntax error: unexpected end of query at position 6",
    });
  });

  it("offers each interaction's draft, latest and versions by name, newest version first", () => {
    const drafts = [ref("d1", "Summary", "draft"), ref("d2", "Greeting", "draft")];
    const versions = [
      ref("v1", "Summary", "published", 1),
      ref("v3", "Summary", "published", 3),
      ref("v2", "Summary", "published", 2),
      ref("w1", "Gone", "published", 1),
    ];
    expect(targetChoices(drafts, versions)).toEqual([
      { group: "Gone", items: ["Gone@latest", "Gone@1"] },
      { group: "Greeting", items: ["Greeting@draft"] },
      {
        group: "Summary",
        items: ["Summary@draft", "Summary@latest", "Summary@3", "Summary@2", "Summary@1"],
      },
    ]);
    // The runs filtered by an interaction: its draft is the target to start from.
    expect(defaultTarget(parseView("?interaction=v2"), drafts, versions)).toBe("Summary@draft");
    expect(defaultTarget(parseView("?interaction=w1"), drafts, versions)).toBe("Gone@latest");
    expect(defaultTarget(parseView("?interaction=zz"), drafts, versions)).toBe("zz");
    expect(defaultTarget(parseView(""), drafts, versions)).toBe("");
    const names = interactionNames(drafts, versions);
    expect(describeView(parseView("?q=a:b&interaction=v3&tags=x,y&range=7d"), names)).toEqual([
      "query: a:b",
      "interaction: Summary@3",
      "tags: x, y",
      "time: last 7 days",
    ]);
  });
});

describe("an experiment's source, read back", () => {
  const source = {
    query: "name:Ada",
    filters: {
      tags: ["a", "b"],
      interaction: "i1",
      updated_at: { gte: "2026-12-06T12:00:00.000Z" },
    },
    limit: 50,
  };

  it("in words", () => {
    expect(describeSource(source)).toEqual([
      "query: name:Ada",
      "tags: a, b",
      "interaction: i1",
      "updated_at ≥ 2026-12-06T12:00:00.000Z",
      "at most 50 runs, newest first",
    ]);
    expect(describeSource({})).toEqual(["every run", "at most 100 runs, newest first"]);
  });

  it("as the runs page's address", () => {
    const link = sourceLink(source);
    expect(link.startsWith("/runs?")).toBe(true);
    expect(parseView(link.slice("/runs".length))).toMatchObject({
      q: "name:Ada",
      tags: ["a", "b"],
      interaction: "i1",
      from: "2026-12-06T12:00:00.000Z",
      to: undefined,
      page: 1,
    });
    expect(sourceLink({ filters: { tags: "solo", modelId: ["m1"] } })).toBe(
      "/runs?model=m1&tags=solo",
    );
  });
});

const progress = (p: Partial<Progress>): Progress => ({
  selected: 10,
  skipped: 0,
  total: 10,
  done: 0,
  completed: 0,
  failed: 0,
  running: 0,
  pending: 10,
  cancelled: 0,
  ...p,
});

describe("an experiment's progress", () => {
  it("as the parts of a bar and in words", () => {
    const p = progress({ done: 5, completed: 4, failed: 1, running: 2, pending: 3 });
    expect(progressParts(p)).toEqual([
      { key: "completed", label: "completed", count: 4, percent: 40 },
      { key: "failed", label: "failed", count: 1, percent: 10 },
      { key: "running", label: "running", count: 2, percent: 20 },
    ]);
    expect(progressText(p)).toBe(
      "5 of 10 pairs done · 4 completed · 1 failed · 2 running · 3 pending",
    );
    expect(progressText(progress({ total: 0, pending: 0 }))).toBe("No pair to replay.");
    expect(progressText(progress({ done: 1, completed: 1, pending: 0, cancelled: 9 }))).toMatch(
      /9 cancelled$/,
    );
  });

  const summary = (p: Partial<ExperimentSummary>): ExperimentSummary =>
    ({
      id: "e1",
      status: "running",
      cancel_requested: false,
      progress: progress({}),
      ...p,
    }) as ExperimentSummary;

  it("never goes back: an ended experiment, its pairs done, a cancel asked for", () => {
    const ended = summary({ status: "completed", progress: progress({ done: 10 }) });
    const five = summary({ progress: progress({ done: 5 }) });
    const six = summary({ progress: progress({ done: 6 }) });
    expect(fresher(undefined, five)).toBe(five);
    expect(fresher(five, six)).toBe(six);
    expect(fresher(six, five)).toBe(six);
    expect(fresher(ended, six)).toBe(ended);
    expect(fresher(six, ended)).toBe(ended);
    const cancelling = summary({ cancel_requested: true, progress: progress({ done: 5 }) });
    expect(fresher(cancelling, six)).toEqual({ ...six, cancel_requested: true });
    expect(fresher(summary({ id: "e2" }), five)).toBe(five);
  });
});

const side = (p: Partial<Comparison["original"]>): Comparison["original"] => ({
  schema_valid_rate: 1,
  p50_latency_ms: 100,
  tokens: 200,
  cost: null,
  ...p,
});

describe("the comparison side by side", () => {
  it("says how the candidate differs, for the better or the worse", () => {
    const rows = comparisonRows({
      pairs: 8,
      exact_match_rate: 0.75,
      original: side({ cost: 0.002 }),
      candidate: side({ schema_valid_rate: 0.875, p50_latency_ms: 50, tokens: 200, cost: 0 }),
      judge: { mean_score: 0.8333333, scored: 6, failed: 2 },
    });
    expect(rows.map((r) => [r.key, r.original, r.candidate, r.change, r.trend])).toEqual([
      ["schema_valid", "100 %", "87.5 %", "−12.5 pt", "worse"],
      ["exact_match", "", "75.0 %", "2 of 8 differ", "changed"],
      ["p50_latency", "100 ms", "50 ms", "−50 %", "better"],
      ["tokens", "200", "200", "same", "same"],
      ["cost", "$0.0020", "$0", "−100 %", "better"],
      ["judge", "", "0.833 (6 scored, 2 failed)", "", "none"],
    ]);
  });

  it("leaves out what is not known yet", () => {
    const empty = side({ schema_valid_rate: null, p50_latency_ms: null, tokens: null });
    const rows = comparisonRows({
      pairs: 0,
      exact_match_rate: null,
      original: empty,
      candidate: empty,
      judge: null,
    });
    expect(rows.map((r) => [r.candidate, r.change, r.trend])).toEqual([
      ["–", "", "none"],
      ["–", "", "none"],
      ["–", "", "none"],
      ["–", "", "none"],
      ["–", "", "none"],
    ]);
    // A change of ten times or more, as a factor.
    const slower = comparisonRows({
      pairs: 1,
      exact_match_rate: 1,
      original: side({ p50_latency_ms: 1 }),
      candidate: side({ p50_latency_ms: 30_038 }),
      judge: null,
    }).find((r) => r.key === "p50_latency");
    expect(slower).toMatchObject({ candidate: "30,038 ms", change: "×30,038", trend: "worse" });
    expect(changedCount({ pairs: 0, exact_match_rate: null } as Comparison)).toBe(0);
    expect(changedCount({ pairs: 7, exact_match_rate: 3 / 7 } as Comparison)).toBe(4);
  });

  it("names each pair's outcome", () => {
    const pair = (p: Partial<Pair>) =>
      ({
        status: "completed",
        exact_match: false,
        candidate: { schema_valid: true },
        ...p,
      }) as Pair;
    expect(pairOutcome(pair({ status: "pending", candidate: null }))).toEqual({
      label: "pending",
      tone: "idle",
    });
    expect(pairOutcome(pair({ status: "running", candidate: null })).tone).toBe("running");
    expect(pairOutcome(pair({ exact_match: true })).tone).toBe("same");
    expect(pairOutcome(pair({})).tone).toBe("differs");
    expect(pairOutcome(pair({ status: "failed" })).tone).toBe("failed");
    expect(
      pairOutcome(pair({ candidate: { schema_valid: false } as Pair["candidate"] })).label,
    ).toBe("invalid");
  });
});
