import { Alert, Anchor, Button, Group, Loader, Paper, Stack, Text, Title } from "@mantine/core";
import { useEffect, useState, type ReactNode } from "react";
import { Link, useLocation } from "wouter";
import { api, errorMessage, type Run } from "../api/client";
import { JsonView } from "../components/json-view";
import { StatusBadge } from "../components/status-badge";
import { useApi } from "../components/use-api";
import { AttemptsTable } from "../runs/attempts-table";
import { PromptMessages } from "../runs/prompt-messages";
import { RunFacts } from "../runs/run-facts";
import { useRunStream } from "../runs/run-stream";
import { RunsTable } from "../runs/runs-table";

/** A section of the run's page. */
function Section({ title, children }: { title: string; children: ReactNode }) {
  return (
    <Paper withBorder p="md" component="section" aria-label={title}>
      <Title order={2} size="h4" mb="sm">
        {title}
      </Title>
      {children}
    </Paper>
  );
}

/**
 * A run in full (DESIGN.md §12): what it was asked and answered, its error and attempts, what it
 * cost, where it came from, its parent and children; a running run's output live.
 */
export function RunPage({ id }: { id: string }) {
  const loaded = useApi(() => api.GET("/api/v1/runs/{id}", { params: { path: { id } } }), [id]);
  const running =
    !!loaded.data?.stream &&
    (loaded.data.status === "created" || loaded.data.status === "processing");
  const stream = useRunStream(id, running);
  const run = (stream.final ?? loaded.data) as Run | undefined;
  // A blocking run still at work has no stream to read: it is asked for again until it ends.
  const unfinished = !!run && !running && (run.status === "created" || run.status === "processing");
  useEffect(() => {
    if (!unfinished) return;
    const timer = setTimeout(loaded.reload, 2000);
    return () => clearTimeout(timer);
  }, [unfinished, loaded.data]);

  if (!run) {
    if (loaded.loading) return <Loader aria-label="Loading the run" />;
    return (
      <Stack>
        <Title order={1}>Run</Title>
        <Alert
          color={loaded.status === 404 ? "yellow" : "red"}
          title={loaded.status === 404 ? "No such run" : "The run could not be loaded"}
        >
          {loaded.status === 404
            ? `There is no run ${id} in this project (it may have been deleted).`
            : loaded.error}
        </Alert>
        <Anchor component={Link} href="/runs">
          All runs
        </Anchor>
      </Stack>
    );
  }
  return (
    <Stack>
      <Group justify="space-between" align="flex-start">
        <Stack gap={4}>
          <Group gap="sm">
            <Title order={1}>Run</Title>
            <StatusBadge status={run.status} />
          </Group>
          <Text className="mono" size="sm" c="dimmed" data-testid="run-id">
            {run.id}
          </Text>
        </Stack>
        <Group gap="xs">
          <Anchor component={Link} href="/runs">
            All runs
          </Anchor>
          <RunAgain run={run} />
        </Group>
      </Group>
      <Paper withBorder p="md">
        <RunFacts run={run} parent={<ParentLink id={run.parent} />} />
      </Paper>
      {run.error && (
        <Alert color="red" title={`Error: ${run.error.code}`} data-testid="run-error">
          {run.error.message}
          {run.error.data !== undefined && <JsonView value={run.error.data} label="Error data" />}
        </Alert>
      )}
      {(running || stream.text) && (
        <Section title="Live output">
          <Group gap="xs" mb="xs">
            {stream.live && <Loader size="xs" />}
            <Text size="sm" c="dimmed" aria-live="polite">
              {stream.live
                ? "Streaming…"
                : stream.error
                  ? `Stream failed: ${stream.error}`
                  : "Ended."}
            </Text>
          </Group>
          <pre className="message-content" data-testid="live-output">
            {stream.text}
          </pre>
        </Section>
      )}
      {run.store === "metadata" && (
        <Alert color="gray">
          This interaction keeps metadata only: the run&apos;s parameters, prompt and result are not
          stored.
        </Alert>
      )}
      <Section title="Prompt">
        {run.prompt === undefined ? (
          <Text c="dimmed">Not recorded.</Text>
        ) : (
          <PromptMessages prompt={run.prompt} />
        )}
      </Section>
      <Section title="Parameters">
        <JsonView value={run.parameters} label="Parameters" />
      </Section>
      <Section title="Result">
        {run.result === undefined ? (
          <Text c="dimmed">{running ? "Not yet." : "None."}</Text>
        ) : typeof run.result === "string" ? (
          <pre className="message-content" data-testid="result">
            {run.result}
          </pre>
        ) : (
          <div data-testid="result">
            <JsonView value={run.result} label="Result" />
          </div>
        )}
      </Section>
      {run.attempts && run.attempts.length > 0 && (
        <Section title="Attempts">
          <AttemptsTable attempts={run.attempts} />
        </Section>
      )}
      <Children id={run.id} />
    </Stack>
  );
}

/** The parent run: a link, or a word that it is gone (its page would answer 404). */
function ParentLink({ id }: { id?: string }) {
  const parent = useApi(
    id ? () => api.GET("/api/v1/runs/{id}", { params: { path: { id } } }) : undefined,
    [id],
  );
  if (!id) return <>–</>;
  if (parent.status === 404) {
    return (
      <span data-testid="parent-deleted">
        <span className="mono">{id}</span> (deleted)
      </span>
    );
  }
  return (
    <Anchor component={Link} href={`/runs/${id}`} className="mono" data-testid="parent-link">
      {id}
    </Anchor>
  );
}

/** Runs whose parent this run is (replays, experiments). */
function Children({ id }: { id: string }) {
  const children = useApi(
    () => api.POST("/api/v1/runs/search", { body: { limit: 50, filters: { parent: id } } }),
    [id],
  );
  const runs = children.data?.results ?? [];
  if (runs.length === 0) return null;
  return (
    <Section title="Children">
      <RunsTable runs={runs} />
    </Section>
  );
}

/**
 * Executes the run's interaction again with the same input data, tags and configuration
 * (`POST /api/v1/runs`, streamed, with this run as the parent), then opens the new run, whose
 * output comes live.
 */
function RunAgain({ run }: { run: Run }) {
  const [, navigate] = useLocation();
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string>();
  const again = async () => {
    setBusy(true);
    setError(undefined);
    const { data, error: failed } = await api.POST("/api/v1/runs", {
      body: {
        interaction: run.interaction.id,
        data: run.parameters,
        tags: run.tags,
        stream: true,
        parent: run.id,
        config: {
          environment: run.config.environment,
          model: run.config.model,
          temperature: run.config.temperature,
          max_tokens: run.config.max_tokens,
        },
      },
    });
    setBusy(false);
    if (data) navigate(`/runs/${data.id}`);
    else setError(errorMessage(failed));
  };
  return (
    <Stack gap={4} align="flex-end">
      <Button onClick={() => void again()} loading={busy} disabled={run.store === "metadata"}>
        Run again
      </Button>
      {error && (
        <Text c="red" size="sm" role="alert">
          {error}
        </Text>
      )}
    </Stack>
  );
}
