import { Button, Group, Loader, Paper, Text, Title } from "@mantine/core";
import { lazy, Suspense, type ComponentType } from "react";
import type { FacetChartProps } from "./facet-chart";

/** The chart once its code is loaded: rendered as it is, with nothing to wait for. */
let loadedChart: ComponentType<FacetChartProps> | undefined;
const loadChart = () =>
  import("./facet-chart").then((module) => {
    loadedChart = module.default;
    return module;
  });
/** uPlot and its styles are loaded with the first chart, not with the console. */
const LazyFacetChart = lazy(loadChart);

/**
 * Loads the charts' code ahead of the first chart (the runs page asks as it opens, beside its
 * search). A lazy component suspends on its first render even when its code is there, and React
 * then holds the content back for 300 ms after the fallback showed (its reveal throttle): a chart
 * whose code is loaded is rendered directly instead.
 */
export function preloadFacetChart(): void {
  loadChart().catch(() => {
    // The lazy chart asks again when it renders, and shows the failure there.
  });
}

export interface Bucket {
  /** The bucket's value as the API names it (`_id`). */
  id: string;
  /** What people read. */
  label: string;
  count: number;
}

/**
 * One facet: its buckets as a bar chart (a click on a bar filters, when the facet can) and as
 * buttons, which do the same from the keyboard.
 */
export function FacetPanel({
  title,
  buckets,
  filterLabel,
  onSelect,
  buttons = true,
  loading = false,
}: {
  title: string;
  buckets: Bucket[];
  /** `Filter by tag`: the buttons' accessible names are this and the bucket's label. */
  filterLabel?: string;
  onSelect?: (bucket: Bucket) => void;
  buttons?: boolean;
  /** No buckets yet: they are on their way (not `No runs.`). */
  loading?: boolean;
}) {
  const select = onSelect && ((index: number) => buckets[index] && onSelect(buckets[index]));
  const FacetChart = loadedChart ?? LazyFacetChart;
  return (
    <Paper withBorder p="sm" component="section" aria-label={`Facet: ${title}`}>
      <Title order={3} size="h6" mb={4}>
        {title}
      </Title>
      {buckets.length === 0 && loading ? (
        <Loader size="sm" aria-label={`Loading ${title}`} />
      ) : buckets.length === 0 ? (
        <Text size="sm" c="dimmed">
          No runs.
        </Text>
      ) : (
        <Suspense fallback={<Loader size="sm" data-testid="facet-chart-loading" />}>
          <FacetChart
            label={`${title}: ${buckets.map((b) => `${b.label} ${b.count}`).join(", ")}`}
            labels={buckets.map((b) => b.label)}
            counts={buckets.map((b) => b.count)}
            onSelect={select}
          />
        </Suspense>
      )}
      {buttons && onSelect && buckets.length > 0 && (
        <Group gap={4} mt={4}>
          {buckets.map((bucket) => (
            <Button
              key={bucket.id}
              size="compact-xs"
              variant="light"
              aria-label={`${filterLabel ?? "Filter by"} ${bucket.label} (${bucket.count} runs)`}
              onClick={() => onSelect(bucket)}
            >
              {bucket.label} · {bucket.count}
            </Button>
          ))}
        </Group>
      )}
    </Paper>
  );
}
