import {
  Alert,
  Button,
  Loader,
  Badge,
  CloseButton,
  Group,
  Pagination,
  SimpleGrid,
  Stack,
  Text,
  Title,
} from "@mantine/core";
import { useDisclosure, useMediaQuery } from "@mantine/hooks";
import { useEffect, useMemo } from "react";
import { Link, useSearch } from "wouter";
import { api } from "../api/client";
import { duration } from "../components/format";
import { useApi } from "../components/use-api";
import { FacetPanel, preloadFacetChart, type Bucket } from "../runs/facet-panel";
import { QueryBox } from "../runs/query-box";
import { RunsFilters } from "../runs/runs-filters";
import { RunsTable } from "../runs/runs-table";
import { formatView, useRunsView, type RunsView } from "../runs/runs-view";
import {
  PAGE_SIZE,
  searchBody,
  slowFacetsBody,
  TIME_BOUNDARIES,
  timeBoundaries,
  type SearchAnswer,
} from "../runs/search-request";

/**
 * Runs found with the API's own search (DESIGN.md §12): a Lucene query, filters, facets as charts
 * (a click on a bucket filters) and a page of runs; the whole view lives in the address.
 */
export function RunsPage() {
  const search = useSearch();
  const [view, update] = useRunsView();
  // On a phone the filters fold behind a button (the active ones stay shown as chips).
  const small = useMediaQuery("(max-width: 48em)");
  const [filtersOpen, { toggle: toggleFilters }] = useDisclosure(false);
  // The time buckets end at the minute the view was asked for: a view keeps its buckets while
  // it is shown, and the same link asked again a minute later moves with the clock.
  const now = useMemo(() => Math.ceil(Date.now() / 60_000) * 60_000, [search]);
  const body = useMemo(() => searchBody(view, now), [search, now]);
  const found = useApi(() => api.POST("/api/v1/runs/search", { body }), [JSON.stringify(body)]);
  // The facets counted over every run, beside it: the table does not wait for them.
  const slowBody = useMemo(() => slowFacetsBody(view, now), [search, now]);
  const slow = useApi(
    () => api.POST("/api/v1/runs/search", { body: slowBody }),
    [JSON.stringify(slowBody)],
  );
  // The charts' code loads while the search runs, not after its answer.
  useEffect(preloadFacetChart, []);
  const answer = found.data as SearchAnswer | undefined;
  const queryError = found.status === 400 ? found.error : undefined;
  const slowLoading = slow.loading && slow.data === undefined;
  const facets = {
    ...(answer?.meta?.facet ?? {}),
    ...((slow.data as SearchAnswer | undefined)?.meta?.facet ?? {}),
  };
  const total = answer?.meta?.count.total ?? answer?.meta?.count.lower_bound;
  const buckets = (name: string): Bucket[] =>
    (facets[name]?.buckets ?? []).map((b) => ({
      id: String(b._id),
      label: b.name ?? String(b._id),
      count: b.count,
    }));
  // Interactions by name where a facet has named them (a filter chip shows the name, not the id).
  const names = new Map(
    (facets.interaction?.buckets ?? []).map((b) => [String(b._id), b.name ?? String(b._id)]),
  );
  const timeBuckets = (facets.time?.buckets ?? []).map((b) => {
    const i = TIME_BOUNDARIES.indexOf(Number(b._id));
    const upper = TIME_BOUNDARIES[i + 1];
    const label =
      b._id === "more"
        ? `≥ ${duration(TIME_BOUNDARIES.at(-1))}`
        : upper === undefined
          ? String(b._id)
          : `< ${duration(upper)}`;
    return { id: String(b._id), label, count: b.count };
  });
  const bounds = timeBoundaries(view, now);
  // Runs before the chart's first day (all time) are one `earlier` bar, drawn first.
  const overTime = (facets.updated?.buckets ?? [])
    .map((b) => ({
      id: String(b._id),
      label: b._id === "earlier" ? "earlier" : timeLabel(String(b._id), bounds),
      count: b.count,
    }))
    .sort((a, b) => (a.id === "earlier" ? -1 : b.id === "earlier" ? 1 : 0));

  return (
    <Stack>
      <Group justify="space-between" align="baseline">
        <Title order={1}>Runs</Title>
        <Group gap="sm" align="baseline">
          <Text c="dimmed" data-testid="runs-total" aria-live="polite">
            {total === undefined
              ? ""
              : `${total.toLocaleString()}${answer?.meta?.count.lower_bound !== undefined ? "+" : ""} ${total === 1 ? "run" : "runs"}`}
          </Text>
          {/* The search (query and filters, not the page) as an experiment's source. */}
          <Button
            component={Link}
            href={`/experiments/new${formatView({ ...view, page: 1 })}`}
            variant="default"
            size="xs"
            title="Replay these runs against a draft, a version or another model, and compare"
          >
            Experiment…
          </Button>
        </Group>
      </Group>
      <QueryBox query={view.q} error={queryError} onSearch={(q) => update({ q })} />
      {small && (
        <Button
          variant="default"
          onClick={toggleFilters}
          aria-expanded={filtersOpen}
          aria-controls="runs-filters"
          w="fit-content"
        >
          {filtersOpen ? "Hide filters" : "Filters"}
        </Button>
      )}
      {(!small || filtersOpen) && (
        <div id="runs-filters">
          <RunsFilters view={view} onChange={update} />
        </div>
      )}
      <ActiveFilters view={view} onChange={update} names={names} />
      {found.error && !queryError && (
        <Alert color="red" title="The runs could not be loaded">
          {found.error}
        </Alert>
      )}
      {!answer && found.loading && <Loader aria-label="Loading runs" />}
      {answer && (
        <SimpleGrid cols={{ base: 1, sm: 2, lg: 3 }} spacing="sm">
          <FacetPanel
            title="Status"
            filterLabel="Filter by status"
            buckets={buckets("status")}
            onSelect={(b) => update({ status: b.id })}
          />
          <FacetPanel
            title="Model"
            filterLabel="Filter by model"
            buckets={buckets("model")}
            onSelect={(b) => update({ model: b.id })}
          />
          <FacetPanel
            title="Tags"
            filterLabel="Filter by tag"
            buckets={buckets("tags")}
            onSelect={(b) =>
              update({ tags: view.tags.includes(b.id) ? view.tags : [...view.tags, b.id] })
            }
          />
          <FacetPanel
            title="Interaction"
            filterLabel="Filter by interaction"
            buckets={buckets("interaction")}
            loading={slowLoading}
            onSelect={(b) => update({ interaction: b.id })}
          />
          <FacetPanel title="Execution time" buckets={timeBuckets} loading={slowLoading} />
          <FacetPanel
            title="Runs over time"
            buckets={overTime}
            buttons={false}
            onSelect={(b) => {
              const i = bounds.findIndex((t) => new Date(t).toISOString() === b.id);
              const next = bounds[i + 1];
              if (i < 0 || next === undefined) return;
              update({ range: undefined, from: b.id, to: new Date(next).toISOString() });
            }}
          />
        </SimpleGrid>
      )}
      {answer && <RunsTable runs={answer.results ?? []} />}
      {total !== undefined && total > PAGE_SIZE && (
        <Pagination
          total={Math.ceil(Math.min(total, 10_000) / PAGE_SIZE)}
          value={view.page}
          onChange={(page) => update({ page })}
          getItemProps={(page) => ({ "aria-label": `Page ${page}` })}
        />
      )}
    </Stack>
  );
}

/** The filters in force, each removable. */
function ActiveFilters({
  view,
  onChange,
  names,
}: {
  view: RunsView;
  onChange: (c: Partial<RunsView>) => void;
  names: Map<string, string>;
}) {
  const chips: { label: string; clear: Partial<RunsView> }[] = [];
  if (view.status) chips.push({ label: `status: ${view.status}`, clear: { status: undefined } });
  if (view.interaction)
    chips.push({
      label: `interaction: ${names.get(view.interaction) ?? view.interaction}`,
      clear: { interaction: undefined },
    });
  if (view.model) chips.push({ label: `model: ${view.model}`, clear: { model: undefined } });
  if (view.environment)
    chips.push({ label: `environment: ${view.environment}`, clear: { environment: undefined } });
  for (const tag of view.tags)
    chips.push({ label: `tag: ${tag}`, clear: { tags: view.tags.filter((t) => t !== tag) } });
  if (view.from || view.to) {
    chips.push({
      label: `time: ${view.from ? new Date(view.from).toLocaleString() : "…"} – ${view.to ? new Date(view.to).toLocaleString() : "now"}`,
      clear: { from: undefined, to: undefined },
    });
  }
  if (chips.length === 0) return null;
  return (
    <Group gap={6} data-testid="active-filters">
      {chips.map((chip) => (
        <Badge
          key={chip.label}
          variant="light"
          tt="none"
          size="lg"
          rightSection={
            <CloseButton
              size="xs"
              aria-label={`Remove ${chip.label}`}
              onClick={() => onChange(chip.clear)}
            />
          }
        >
          {chip.label}
        </Badge>
      ))}
    </Group>
  );
}

/** A time bucket's label: the hour, or the day when buckets are a day or longer. */
function timeLabel(id: string, bounds: number[]): string {
  const date = new Date(id);
  const step = (bounds[1] ?? 0) - (bounds[0] ?? 0);
  return step >= 86_400_000
    ? date.toLocaleDateString(undefined, { month: "short", day: "numeric" })
    : date.toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit" });
}
