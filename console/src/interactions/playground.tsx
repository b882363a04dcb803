import {
  Alert,
  Anchor,
  Badge,
  Button,
  Group,
  Paper,
  Stack,
  Text,
  TextInput,
  Title,
} from "@mantine/core";
import { useEffect, useRef, useState } from "react";
import { Link } from "wouter";
import { api, errorMessage, type Run } from "../api/client";
import { CodeEditor } from "../editors/lazy";
import { parseJson, pretty } from "../ui/format";
import { unwrap } from "../ui/load";
import { ErrorAlert } from "../ui/states";
import type { Interaction } from "./model";
import { readRunStream } from "../api/run-stream";

/** The test data the playground starts from: the interaction's, else its first template's. */
function initialData(interaction: Interaction): string {
  if (interaction.test_data) return pretty(interaction.test_data);
  for (const segment of interaction.prompts) {
    if (typeof segment.template === "object" && segment.template.test_data) {
      return pretty(segment.template.test_data);
    }
  }
  return "{}";
}

/**
 * Executes the saved draft streamed (`POST /runs {stream: true}`, then its stream read with
 * fetch), showing the chunks as they come and then the final run.
 */
export function Playground({ interaction, dirty }: { interaction: Interaction; dirty: boolean }) {
  const [data, setData] = useState(() => initialData(interaction));
  const [dataError, setDataError] = useState<string>();
  const [output, setOutput] = useState("");
  const [notes, setNotes] = useState<string[]>([]);
  const [run, setRun] = useState<Run>();
  const [runId, setRunId] = useState<string>();
  const [error, setError] = useState<string>();
  const [running, setRunning] = useState(false);
  const [generating, setGenerating] = useState(false);
  const [hint, setHint] = useState("");
  const [rendered, setRendered] = useState<{ role: string; text: string }[]>();
  const [rendering, setRendering] = useState(false);
  const abort = useRef<AbortController | null>(null);
  useEffect(() => () => abort.current?.abort(), []);

  const execute = async () => {
    const parsed = parseJson(data);
    if (parsed.error) {
      setDataError(parsed.error);
      return;
    }
    setDataError(undefined);
    setError(undefined);
    setOutput("");
    setNotes([]);
    setRun(undefined);
    setRunId(undefined);
    setRunning(true);
    abort.current?.abort();
    const controller = new AbortController();
    abort.current = controller;
    let closed = false;
    try {
      const created = unwrap(
        await api.POST("/api/v1/runs", {
          body: {
            interaction: interaction.id,
            data: (parsed.value ?? {}) as Record<string, unknown>,
            stream: true,
            tags: ["playground"],
          },
        }),
      );
      setRunId(created.id);
      await readRunStream(
        created.id,
        (event) => {
          if (event.event === "message") {
            const chunk = JSON.parse(event.data) as string;
            setOutput((text) => text + chunk);
          } else if (event.event === "repair") {
            const { attempt } = JSON.parse(event.data) as { attempt: number };
            setNotes((n) => [...n, `The answer did not match the schema: attempt ${attempt}.`]);
            setOutput((text) => `${text}\n\n— repair, attempt ${attempt} —\n\n`);
          } else if (event.event === "close") {
            closed = true;
            setRun(JSON.parse(event.data) as Run);
          } else if (event.event === "error") {
            closed = true;
            setError(errorMessage(JSON.parse(event.data)));
          }
        },
        controller.signal,
      );
      if (!closed) {
        setError("The stream ended before the run did: its page shows how it ends.");
      }
    } catch (err) {
      if (!controller.signal.aborted) setError(errorMessage(err));
    } finally {
      setRunning(false);
    }
  };

  /** The prompts with the data, as an execution sends them (`POST /prompts/:id/render`). */
  const render = async () => {
    const parsed = parseJson(data);
    if (parsed.error) {
      setDataError(parsed.error);
      return;
    }
    setDataError(undefined);
    setError(undefined);
    setRendering(true);
    try {
      const messages = [];
      for (const segment of interaction.prompts) {
        if (segment.type === "chat") {
          messages.push({ role: "chat", text: `(the messages at ${segment.chat_path ?? ""})` });
          continue;
        }
        const id = typeof segment.template === "object" ? segment.template.id : segment.template;
        if (!id) continue;
        const answer = unwrap(
          await api.POST("/api/v1/prompts/{id}/render", {
            params: { path: { id } },
            body: (parsed.value ?? {}) as Record<string, unknown>,
          }),
        );
        messages.push({ role: answer.role, text: answer.rendered });
      }
      setRendered(messages);
    } catch (err) {
      setRendered(undefined);
      setError(errorMessage(err));
    } finally {
      setRendering(false);
    }
  };

  const generate = async () => {
    setError(undefined);
    const environment = interaction.environment;
    if (!environment) {
      setError("Generating test data needs an environment: choose one in the draft's settings.");
      return;
    }
    setGenerating(true);
    try {
      const items = unwrap(
        await api.POST("/api/v1/interactions/{id}/generate-test-data", {
          params: { path: { id: interaction.id } },
          body: {
            count: 1,
            ...(hint.trim() ? { message: hint.trim() } : {}),
            config: { environment, ...(interaction.model ? { model: interaction.model } : {}) },
          },
        }),
      );
      if (items[0] !== undefined) setData(pretty(items[0]));
    } catch (err) {
      setError(errorMessage(err));
    } finally {
      setGenerating(false);
    }
  };

  const status = run?.status;
  return (
    <Stack>
      {dirty && (
        <Alert color="yellow" role="status" data-testid="unsaved">
          The draft has unsaved changes: the playground runs the saved draft.
        </Alert>
      )}
      <Stack gap={4}>
        <Title order={2} size="h4">
          Input data
        </Title>
        <CodeEditor
          language="json"
          label="Input data (JSON)"
          value={data}
          onChange={setData}
          invalid={Boolean(dataError)}
          testId="playground-data"
        />
        {dataError && (
          <div className="field-error" role="alert">
            {dataError}
          </div>
        )}
      </Stack>
      <Group align="flex-end" wrap="wrap">
        <Button onClick={() => void execute()} loading={running} data-testid="run-draft">
          Run the draft
        </Button>
        <Button variant="default" onClick={() => void render()} loading={rendering}>
          Render the prompts
        </Button>
        <TextInput
          label="Hint for generated data"
          placeholder="e.g. a long text in French"
          value={hint}
          onChange={(e) => setHint(e.currentTarget.value)}
        />
        <Button variant="light" onClick={() => void generate()} loading={generating}>
          Generate test data
        </Button>
      </Group>
      {error && <ErrorAlert message={error} />}
      {rendered && (
        <Paper withBorder p="sm" data-testid="rendered">
          <Stack gap="xs">
            <Title order={2} size="h4">
              Prompts as sent
            </Title>
            {rendered.map((message, index) => (
              <Stack key={index} gap={2}>
                <Text size="xs" fw={700} tt="uppercase" c="dimmed">
                  {message.role}
                </Text>
                <pre className="message-content">{message.text}</pre>
              </Stack>
            ))}
          </Stack>
        </Paper>
      )}
      {(runId || output) && (
        <Paper withBorder p="sm">
          <Stack gap="xs">
            <Group justify="space-between">
              <Title order={2} size="h4">
                Output
              </Title>
              <Group gap="xs">
                {running && !run && <Badge color="blue">streaming</Badge>}
                {status && (
                  <Badge color={status === "completed" ? "green" : "red"} data-testid="run-status">
                    {status}
                  </Badge>
                )}
                {runId && (
                  <Anchor component={Link} href={`/runs/${runId}`} data-testid="run-link">
                    Run {runId}
                  </Anchor>
                )}
              </Group>
            </Group>
            {notes.map((note) => (
              <Text key={note} size="sm" c="orange">
                {note}
              </Text>
            ))}
            <pre className="stream-output" data-testid="stream-output" aria-live="polite">
              {output}
            </pre>
          </Stack>
        </Paper>
      )}
      {run && (
        <Paper withBorder p="sm" data-testid="final-run">
          <Stack gap="xs">
            <Title order={2} size="h4">
              Final run
            </Title>
            {run.error && (
              <Alert color="red" role="alert">
                {run.error.code}: {run.error.message}
              </Alert>
            )}
            <Text size="sm">
              Model {run.modelId ?? "—"}
              {run.token_use ? ` · ${run.token_use.total ?? 0} tokens` : ""}
            </Text>
            {run.result !== undefined && (
              <pre className="stream-output" data-testid="final-result">
                {typeof run.result === "string" ? run.result : pretty(run.result)}
              </pre>
            )}
          </Stack>
        </Paper>
      )}
    </Stack>
  );
}
