import "../ui/pages.css";
import "./experiments.css";
import {
  Alert,
  Anchor,
  Button,
  Group,
  Loader,
  Paper,
  SegmentedControl,
  SimpleGrid,
  Stack,
  Text,
  Title,
} from "@mantine/core";
import { useEffect, useState, type ReactNode } from "react";
import { Link, useSearchParams } from "wouter";
import { api, errorMessage } from "../api/client";
import { dateTime } from "../components/format";
import { StatusBadge } from "../components/status-badge";
import { useApi } from "../components/use-api";
import { Fact } from "../runs/run-facts";
import { ComparisonTable } from "./comparison-table";
import { useExperimentStream } from "./experiment-stream";
import { changedCount, describeSource, fresher, isRunning, sourceLink } from "./experiment-view";
import type { Experiment, ExperimentSummary } from "./model";
import { PairsTable } from "./pairs-table";
import { ProgressBar } from "./progress-panel";

/** Pairs a page shows. */
export const PAIRS_PAGE = 20;

/** A section of the page. */
function Section({
  title,
  children,
  actions,
}: {
  title: string;
  children: ReactNode;
  actions?: ReactNode;
}) {
  return (
    <Paper withBorder p="md" component="section" aria-label={title}>
      <Group justify="space-between" mb="sm" gap="xs">
        <Title order={2} size="h4">
          {title}
        </Title>
        {actions}
      </Group>
      {children}
    </Paper>
  );
}

/**
 * An experiment (DESIGN.md §13): its source, target and judge, its progress live while it runs
 * (the stream's events; asked again every few seconds when no stream can be had), a cancel, the
 * comparison's totals side by side and a page of its pairs, all or only those that changed (in
 * the address: `?changed=1&page=2`).
 */
export default function ExperimentPage({ id }: { id: string }) {
  const [params, setParams] = useSearchParams();
  const changedOnly = params.get("changed") === "1";
  const page = Math.max(1, Number(params.get("page")) || 1);
  const setView = (changes: { changed?: boolean; page?: number }) =>
    setParams((prev) => {
      const next = new URLSearchParams(prev);
      const changed = changes.changed ?? changedOnly;
      if (changed) next.set("changed", "1");
      else next.delete("changed");
      const p = changes.page ?? 1;
      if (p > 1) next.set("page", String(p));
      else next.delete("page");
      return next;
    });

  // One more pair than shown: whether there is a next page (the API counts no changed pairs).
  const loaded = useApi(
    () =>
      api.GET("/api/v1/experiments/{id}", {
        params: {
          path: { id },
          query: {
            pairs_limit: PAIRS_PAGE + 1,
            pairs_offset: (page - 1) * PAIRS_PAGE,
            changed: changedOnly ? "true" : undefined,
          },
        },
      }),
    [id, page, changedOnly],
  );
  const base = loaded.data as Experiment | undefined;
  const baseRunning = !!base && isRunning(base);
  const stream = useExperimentStream(id, baseRunning);

  // The experiment as last heard of, from any of the three.
  const [live, setLive] = useState<ExperimentSummary>();
  useEffect(() => {
    if (base) setLive((current) => fresher(current, base));
  }, [base]);
  useEffect(() => {
    const latest = stream.latest;
    if (latest) setLive((current) => fresher(current, latest));
  }, [stream.latest]);
  const experiment = live ?? base;

  // Its pairs follow: asked again when more are done (not more often than every 1.5 s), and at
  // once when it ended (its header says so already); every 3 s while no stream can be read.
  const statusChanged = !!base && !!experiment && experiment.status !== base.status;
  const behind =
    statusChanged || (!!base && !!experiment && experiment.progress.done !== base.progress.done);
  useEffect(() => {
    if (!behind || loaded.loading) return;
    const timer = setTimeout(loaded.reload, statusChanged ? 0 : 1500);
    return () => clearTimeout(timer);
  }, [behind, statusChanged, loaded.loading, experiment?.progress.done, experiment?.status]);
  const polling = baseRunning && !!stream.failed;
  useEffect(() => {
    if (!polling) return;
    const timer = setTimeout(loaded.reload, 3000);
    return () => clearTimeout(timer);
  }, [polling, base]);

  if (!experiment || !base) {
    if (loaded.loading || !loaded.error) return <Loader aria-label="Loading the experiment" />;
    return (
      <Stack>
        <Title order={1}>Experiment</Title>
        <Alert
          color={loaded.status === 404 ? "yellow" : "red"}
          title={
            loaded.status === 404 ? "No such experiment" : "The experiment could not be loaded"
          }
          data-testid="error"
        >
          {loaded.status === 404 ? `There is no experiment ${id} in this project.` : loaded.error}
        </Alert>
        <Anchor component={Link} href="/experiments">
          All experiments
        </Anchor>
      </Stack>
    );
  }

  const running = isRunning(experiment);
  const target = experiment.target as {
    interaction?: string;
    config?: Record<string, unknown>;
  };
  const pairs = base.pairs ?? [];
  const shown = pairs.slice(0, PAIRS_PAGE);
  const changed = changedCount(experiment.comparison);
  const from = (page - 1) * PAIRS_PAGE;
  return (
    <Stack>
      <Group justify="space-between" align="flex-start">
        <Stack gap={4}>
          <Group gap="sm">
            <Title order={1}>{experiment.name}</Title>
            <span data-testid="experiment-status">
              <StatusBadge status={experiment.status} />
            </span>
          </Group>
          <Text className="mono" size="sm" c="dimmed" data-testid="experiment-id">
            {experiment.id}
          </Text>
        </Stack>
        <Group gap="xs">
          <Anchor component={Link} href="/experiments">
            All experiments
          </Anchor>
          {running && (
            <CancelButton
              experiment={experiment}
              onCancelled={(e) => setLive((current) => fresher(current, e))}
            />
          )}
        </Group>
      </Group>
      {experiment.error && (
        <Alert color="red" title="The experiment failed" data-testid="experiment-error">
          {experiment.error}
        </Alert>
      )}
      <Paper withBorder p="md">
        <SimpleGrid cols={{ base: 1, sm: 2, md: 4 }} spacing="md" verticalSpacing="sm">
          <Fact label="Runs replayed">
            <ul className="source-lines" data-testid="experiment-source">
              {describeSource(experiment.source).map((line) => (
                <li key={line}>
                  <Text size="sm" span className="mono">
                    {line}
                  </Text>
                </li>
              ))}
            </ul>
            <Anchor component={Link} href={sourceLink(experiment.source)} size="sm">
              Show these runs
            </Anchor>
          </Fact>
          <Fact label="Target">
            <Text className="mono" size="sm" data-testid="experiment-target">
              {target.interaction ?? "–"}
            </Text>
            {Object.entries(target.config ?? {}).map(([key, value]) => (
              <Text size="xs" c="dimmed" key={key}>
                {key}: <span className="mono">{String(value)}</span>
              </Text>
            ))}
          </Fact>
          <Fact label="Judge">
            <Text className="mono" size="sm">
              {experiment.judge ?? "none"}
            </Text>
          </Fact>
          <Fact label="Started">
            <Text size="sm">{dateTime(experiment.created_at)}</Text>
            <Text size="xs" c="dimmed">
              {experiment.ended_at
                ? `ended ${dateTime(experiment.ended_at)}`
                : `${experiment.concurrency} at once`}
            </Text>
          </Fact>
        </SimpleGrid>
      </Paper>
      <Section
        title="Progress"
        actions={
          running && (
            <Group gap={6}>
              <Loader size="xs" />
              <Text size="xs" c="dimmed" data-testid="live-state">
                {polling ? "Updated every few seconds" : "Live"}
              </Text>
            </Group>
          )
        }
      >
        <Stack gap="xs">
          <ProgressBar progress={experiment.progress} live />
          {experiment.progress.skipped > 0 && (
            <Text size="sm" c="dimmed">
              {experiment.progress.selected} runs matched; {experiment.progress.skipped} of them
              keep no input (metadata only) and are not replayed.
            </Text>
          )}
          {running && experiment.cancel_requested && (
            <Text size="sm" data-testid="cancelling">
              Cancelling: no more pairs start; those under way end and are compared.
            </Text>
          )}
        </Stack>
      </Section>
      <Section title="Comparison">
        <ComparisonTable comparison={experiment.comparison} />
      </Section>
      <Section
        title="Pairs"
        actions={
          <SegmentedControl
            size="xs"
            aria-label="Pairs shown"
            value={changedOnly ? "changed" : "all"}
            onChange={(v) => setView({ changed: v === "changed" })}
            data={[
              { value: "all", label: `All (${experiment.progress.total})` },
              {
                value: "changed",
                label: changed === undefined ? "Changed only" : `Changed only (${changed})`,
              },
            ]}
          />
        }
      >
        <Stack gap="xs">
          <Text size="xs" c="dimmed">
            <mark className="diff-mark diff-old diff-legend">removed or replaced</mark> in the
            original, <mark className="diff-mark diff-new diff-legend">added or replacing</mark> in
            the candidate, <mark className="diff-mark diff-moved diff-legend">moved</mark>.
            {changedOnly && " Changed: the results differ, or the replay failed."}
          </Text>
          {loaded.error && (
            <Alert color="red" title="The pairs could not be loaded">
              {loaded.error}
            </Alert>
          )}
          {shown.length === 0 ? (
            <Text c="dimmed" data-testid="pairs-empty">
              {page > 1
                ? "No pair on this page."
                : changedOnly
                  ? "No pair changed (yet)."
                  : "No pair to show."}
            </Text>
          ) : (
            <PairsTable pairs={shown} />
          )}
          {(page > 1 || pairs.length > PAIRS_PAGE) && (
            <Group gap="xs" justify="space-between">
              <Text size="sm" c="dimmed" data-testid="pairs-range">
                Pairs {from + 1}–{from + shown.length}
              </Text>
              <Group gap="xs">
                <Button
                  variant="default"
                  size="xs"
                  disabled={page <= 1}
                  onClick={() => setView({ page: page - 1 })}
                >
                  Previous pairs
                </Button>
                <Button
                  variant="default"
                  size="xs"
                  disabled={pairs.length <= PAIRS_PAGE}
                  onClick={() => setView({ page: page + 1 })}
                >
                  Next pairs
                </Button>
              </Group>
            </Group>
          )}
        </Stack>
      </Section>
    </Stack>
  );
}

/** Stops starting pairs (`POST /experiments/:id/cancel`); those in flight end and are compared. */
function CancelButton({
  experiment,
  onCancelled,
}: {
  experiment: ExperimentSummary;
  onCancelled: (e: ExperimentSummary) => void;
}) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string>();
  const cancel = async () => {
    setBusy(true);
    setError(undefined);
    const { data, error: failed } = await api.POST("/api/v1/experiments/{id}/cancel", {
      params: { path: { id: experiment.id } },
      body: {},
    });
    setBusy(false);
    if (data) onCancelled(data);
    else setError(errorMessage(failed));
  };
  return (
    <Stack gap={4} align="flex-end">
      <Button
        color="red"
        variant="light"
        onClick={() => void cancel()}
        loading={busy}
        disabled={experiment.cancel_requested}
      >
        {experiment.cancel_requested ? "Cancelling…" : "Cancel experiment"}
      </Button>
      {error && (
        <Text c="red" size="sm" role="alert">
          {error}
        </Text>
      )}
    </Stack>
  );
}
