import { describe, expect, it } from "vitest";
import { formatView, parseView, windowOf } from "./runs-view";
import { errorPosition, searchBody, slowFacetsBody, timeBoundaries } from "./search-request";

// The runs page's view lives in the query string: what a link carries must come back the same.
describe("the runs view in the address", () => {
  it("reads back what it writes, and leaves defaults out", () => {
    const view = parseView(
      "?q=name%3AAda+AND+lang%3Aen&status=failed&model=gpt-4o&tags=a,b&range=24h&page=3",
    );
    expect(view).toEqual({
      q: "name:Ada AND lang:en",
      status: "failed",
      interaction: undefined,
      model: "gpt-4o",
      environment: undefined,
      tags: ["a", "b"],
      range: "24h",
      from: undefined,
      to: undefined,
      page: 3,
    });
    expect(parseView(formatView(view))).toEqual(view);
    expect(formatView(parseView(""))).toBe("");
    // Nonsense falls back to the defaults instead of breaking the page.
    expect(parseView("?page=-2&range=forever")).toMatchObject({ page: 1, range: undefined });
  });

  it("turns filters and the time window into a search body", () => {
    const now = Date.parse("2026-12-07T12:00:00Z");
    const view = parseView("?q=x&status=completed&tags=a&from=2026-12-01T00:00:00.000Z&page=2");
    expect(windowOf(view, now)).toEqual({ from: Date.parse("2026-12-01T00:00:00Z") });
    const body = searchBody(view, now);
    expect(body).toMatchObject({
      query: "x",
      limit: 25,
      offset: 25,
      filters: {
        status: "completed",
        tags: ["a"],
        updated_at: { gte: "2026-12-01T00:00:00.000Z" },
      },
    });
    // The page's request asks only the facets the runs service's rollup counts (status, model,
    // tags, updated_at): one counted over every run (interaction, execution time) would hold the
    // table back for seconds at a million runs (issue 27). Those come in a request of their own.
    expect(Object.keys(body.facets ?? {})).toEqual(["status", "model", "tags", "updated"]);
    const slow = slowFacetsBody(view, now);
    expect(slow).toEqual({
      query: "x",
      onlyMeta: true,
      filters: body.filters,
      facets: {
        interaction: { type: "string", path: "interaction", numBuckets: 10 },
        time: expect.objectContaining({ path: "execution_time" }),
      },
    });
  });

  it("keeps a cost range in the address and sends it as the cost filter", () => {
    const view = parseView("?min_cost=0.5&max_cost=2");
    expect(formatView(view)).toBe("?min_cost=0.5&max_cost=2");
    const now = Date.parse("2026-12-07T12:00:00Z");
    expect(searchBody(view, now).filters?.cost).toEqual({ gte: 0.5, lte: 2 });
    expect(slowFacetsBody(view, now).filters?.cost).toEqual({ gte: 0.5, lte: 2 });
    expect(searchBody(parseView("?max_cost=1"), now).filters?.cost).toEqual({
      gte: undefined,
      lte: 1,
    });
    // Nonsense is no bound.
    expect(parseView("?min_cost=-1&max_cost=abc")).toMatchObject({
      minCost: undefined,
      maxCost: undefined,
    });
    expect(searchBody(parseView(""), now).filters?.cost).toBeUndefined();
  });

  it("cuts the time window into equal ascending buckets that end now", () => {
    const now = Date.parse("2026-12-07T12:00:00Z");
    const day = timeBoundaries(parseView("?range=24h"), now);
    expect(day).toHaveLength(25);
    expect(day.at(-1)).toBe(now);
    expect(day[1]! - day[0]!).toBe(3_600_000);
    const all = timeBoundaries(parseView(""), now);
    expect(all).toHaveLength(31);
    expect(all[1]! - all[0]!).toBe(86_400_000);
  });

  it("ends buckets of an hour or more at the next full hour, each on an hour", () => {
    // Boundaries inside an hour are counted over that hour's runs, not from the hourly rollup.
    const now = Date.parse("2026-12-07T12:34:00Z");
    for (const search of ["", "?range=24h", "?range=7d", "?range=30d"]) {
      const bounds = timeBoundaries(parseView(search), now);
      expect(bounds.at(-1)).toBe(Date.parse("2026-12-07T13:00:00Z"));
      for (const b of bounds) expect(b % 3_600_000).toBe(0);
    }
    // Five-minute buckets of the last hour end now.
    expect(timeBoundaries(parseView("?range=1h"), now).at(-1)).toBe(now);
  });

  it("finds where a query broke in the API's message", () => {
    expect(errorPosition("query: syntax error: unexpected end of query at position 9")).toBe(9);
    expect(errorPosition("unknown facet path")).toBeUndefined();
  });
});
