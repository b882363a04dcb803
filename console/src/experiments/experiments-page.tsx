import "./experiments.css";
import { Anchor, Button, Group, Stack, Table, Text, Title } from "@mantine/core";
import { useEffect } from "react";
import { Link, useSearchParams } from "wouter";
import { api } from "../api/client";
import { dateTime } from "../components/format";
import { StatusBadge } from "../components/status-badge";
import { useApi } from "../components/use-api";
import { ErrorAlert } from "../ui/states";
import { isRunning, percent } from "./experiment-view";
import type { ExperimentSummary } from "./model";
import { ProgressBar } from "./progress-panel";

/** Experiments a page lists. */
const PAGE = 20;

/**
 * The project's experiments, newest first (`GET /experiments`), with their status and progress;
 * asked again every few seconds while one of them runs. The page is in the address (`?page=2`).
 */
export default function ExperimentsPage() {
  const [params, setParams] = useSearchParams();
  const page = Math.max(1, Number(params.get("page")) || 1);
  // One more than shown: whether there is a next page.
  const loaded = useApi(
    () =>
      api.GET("/api/v1/experiments", {
        params: { query: { limit: PAGE + 1, offset: (page - 1) * PAGE } },
      }),
    [page],
  );
  const experiments = (loaded.data ?? []) as ExperimentSummary[];
  const anyRunning = experiments.some(isRunning);
  useEffect(() => {
    if (!anyRunning || loaded.loading) return;
    const timer = setTimeout(loaded.reload, 3000);
    return () => clearTimeout(timer);
  }, [anyRunning, loaded.data, loaded.loading]);
  const go = (p: number) =>
    setParams((prev) => {
      const next = new URLSearchParams(prev);
      if (p > 1) next.set("page", String(p));
      else next.delete("page");
      return next;
    });
  const shown = experiments.slice(0, PAGE);

  return (
    <Stack>
      <Group justify="space-between" align="baseline">
        <Title order={1}>Experiments</Title>
        <Button component={Link} href="/runs" variant="default">
          Start one from a runs search
        </Button>
      </Group>
      <Text c="dimmed" size="sm">
        An experiment replays the runs a search selects against a draft, a version or another model,
        and compares each new result with the original.
      </Text>
      {loaded.error && (
        <ErrorAlert
          message={loaded.error}
          retry={loaded.reload}
          title="The experiments could not be loaded"
        />
      )}
      {loaded.data === undefined && loaded.loading && (
        <Text c="dimmed" aria-busy="true">
          Loading…
        </Text>
      )}
      {loaded.data !== undefined && shown.length === 0 && (
        <Text c="dimmed" data-testid="experiments-empty">
          {page > 1
            ? "No experiment on this page."
            : "No experiment yet: search the runs, then choose Experiment…"}
        </Text>
      )}
      {shown.length > 0 && (
        <div className="table-scroll">
          <Table striped highlightOnHover data-testid="experiments" miw={760}>
            <Table.Thead>
              <Table.Tr>
                <Table.Th>Name</Table.Th>
                <Table.Th>Status</Table.Th>
                <Table.Th miw={200}>Progress</Table.Th>
                <Table.Th>Target</Table.Th>
                <Table.Th ta="right">Exact match</Table.Th>
                <Table.Th>Started</Table.Th>
              </Table.Tr>
            </Table.Thead>
            <Table.Tbody>
              {shown.map((e) => (
                <Table.Tr key={e.id} data-experiment-id={e.id}>
                  <Table.Td>
                    <Anchor component={Link} href={`/experiments/${e.id}`}>
                      {e.name}
                    </Anchor>
                  </Table.Td>
                  <Table.Td>
                    <StatusBadge status={e.status} />
                  </Table.Td>
                  <Table.Td>
                    <Stack gap={2}>
                      <ProgressBar
                        progress={e.progress}
                        size="sm"
                        label={`Progress of ${e.name}`}
                      />
                      <Text size="xs" c="dimmed" data-testid="experiment-progress">
                        {e.progress.done} / {e.progress.total} done
                        {e.progress.failed ? `, ${e.progress.failed} failed` : ""}
                      </Text>
                    </Stack>
                  </Table.Td>
                  <Table.Td className="mono">
                    {String((e.target as { interaction?: string }).interaction ?? "–")}
                  </Table.Td>
                  <Table.Td ta="right">{percent(e.comparison.exact_match_rate)}</Table.Td>
                  <Table.Td className="nowrap">{dateTime(e.created_at)}</Table.Td>
                </Table.Tr>
              ))}
            </Table.Tbody>
          </Table>
        </div>
      )}
      {(page > 1 || experiments.length > PAGE) && (
        <Group gap="xs">
          <Button variant="default" size="xs" disabled={page <= 1} onClick={() => go(page - 1)}>
            Newer
          </Button>
          <Button
            variant="default"
            size="xs"
            disabled={experiments.length <= PAGE}
            onClick={() => go(page + 1)}
          >
            Older
          </Button>
        </Group>
      )}
    </Stack>
  );
}
