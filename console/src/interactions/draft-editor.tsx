import {
  Alert,
  Autocomplete,
  Button,
  Fieldset,
  Group,
  Paper,
  Select,
  SimpleGrid,
  Stack,
  Text,
  TextInput,
  Title,
} from "@mantine/core";
import { useState, type FormEvent } from "react";
import { api } from "../api/client";
import { CodeEditor } from "../editors/lazy";
import { unwrap, useLoad } from "../ui/load";
import {
  CONTENT_TYPES,
  fieldOfMessage,
  newSegment,
  prepare,
  ROLES,
  type DraftForm,
  type FieldErrors,
  type Interaction,
  type SegmentForm,
} from "./model";

export interface EnvironmentOption {
  id: string;
  name: string;
  provider: string;
}

/** A field's error under an editor that is not a Mantine input (CodeMirror). */
function FieldError({ id, message }: { id: string; message?: string }) {
  if (!message) return null;
  return (
    <div className="field-error" id={id} role="alert" data-testid={`error-${id}`}>
      {message}
    </div>
  );
}

/**
 * An interaction's draft: its prompts (CodeMirror, highlighted for their content type), result
 * schema, test data and model settings. Saving writes the changed templates (`PUT /prompts/:id`),
 * then the interaction (`PUT`, or `POST` for a new one); an error is shown at its field.
 */
export function DraftEditor({
  form,
  setForm,
  interactionId,
  environments,
  onSaved,
}: {
  form: DraftForm;
  setForm: (update: (form: DraftForm) => DraftForm) => void;
  interactionId?: string;
  environments: EnvironmentOption[];
  onSaved: (interaction: Interaction) => void;
}) {
  const [errors, setErrors] = useState<FieldErrors>({});
  const [general, setGeneral] = useState<string>();
  const [saving, setSaving] = useState(false);
  const [savedAt, setSavedAt] = useState<string>();

  const set = <K extends keyof DraftForm>(key: K, value: DraftForm[K]) =>
    setForm((f) => ({ ...f, [key]: value }));
  const setSegment = (index: number, patch: Partial<SegmentForm>) =>
    setForm((f) => ({
      ...f,
      segments: f.segments.map((s, i) => (i === index ? { ...s, ...patch } : s)),
    }));

  const save = async (event: FormEvent) => {
    event.preventDefault();
    setGeneral(undefined);
    setSavedAt(undefined);
    const { prepared, errors: found } = prepare(form);
    setErrors(found);
    if (!prepared) {
      setGeneral("Some fields need attention before saving.");
      return;
    }
    setSaving(true);
    try {
      for (const template of prepared.templates) {
        const answer = await api.PUT("/api/v1/prompts/{id}", {
          params: { path: { id: template.id } },
          body: template.body,
        });
        if (!answer.response.ok) {
          const message = (answer.error as { message?: string } | undefined)?.message ?? "";
          const field = /inputSchema|input_schema/.test(message) ? "inputSchema" : "content";
          setErrors({ [`segments.${template.index}.${field}`]: message });
          setGeneral(`Prompt ${template.index + 1} was not saved: ${message}`);
          return;
        }
      }
      const answer = interactionId
        ? await api.PUT("/api/v1/interactions/{id}", {
            params: { path: { id: interactionId } },
            body: prepared.body,
          })
        : await api.POST("/api/v1/interactions", { body: prepared.body });
      try {
        const saved = unwrap(answer);
        setSavedAt(new Date().toLocaleTimeString());
        onSaved(saved);
      } catch (err) {
        const message = (err as Error).message;
        const field = fieldOfMessage(message);
        if (/inputSchema/.test(message)) setGeneral(`A prompt's input schema: ${message}`);
        else if (field) {
          setErrors({ [field]: message });
          setGeneral("The interaction was not saved: see the field marked.");
        } else setGeneral(message);
      }
    } finally {
      setSaving(false);
    }
  };

  const envOptions = environments.map((e) => ({
    value: e.id,
    label: `${e.name} (${e.provider})`,
  }));

  return (
    <form onSubmit={(e) => void save(e)} aria-label="Interaction draft" noValidate>
      <Stack>
        {general && (
          <Alert color="red" role="alert" data-testid="save-error">
            {general}
          </Alert>
        )}
        <SimpleGrid cols={{ base: 1, sm: 2 }}>
          <TextInput
            label="Name"
            required
            value={form.name}
            onChange={(e) => set("name", e.currentTarget.value)}
            error={errors.name}
          />
          <TextInput
            label="Description"
            value={form.description}
            onChange={(e) => set("description", e.currentTarget.value)}
          />
        </SimpleGrid>

        <Fieldset legend="Prompts">
          <Stack>
            {errors.segments && <FieldError id="segments" message={errors.segments} />}
            {form.segments.map((segment, index) => (
              <SegmentEditor
                key={segment.key}
                index={index}
                segment={segment}
                errors={errors}
                count={form.segments.length}
                onChange={(patch) => setSegment(index, patch)}
                onRemove={() =>
                  setForm((f) => ({ ...f, segments: f.segments.filter((_, i) => i !== index) }))
                }
                onMove={(delta) =>
                  setForm((f) => {
                    const segments = [...f.segments];
                    segments.splice(index + delta, 0, ...segments.splice(index, 1));
                    return { ...f, segments };
                  })
                }
              />
            ))}
            <Group>
              <Button
                variant="light"
                onClick={() => setForm((f) => ({ ...f, segments: [...f.segments, newSegment()] }))}
              >
                Add a prompt
              </Button>
              <Button
                variant="subtle"
                onClick={() =>
                  setForm((f) => ({
                    ...f,
                    segments: [
                      ...f.segments,
                      { ...newSegment(), type: "chat", chatPath: "messages" },
                    ],
                  }))
                }
              >
                Add chat messages from the data
              </Button>
            </Group>
          </Stack>
        </Fieldset>

        <Fieldset legend="Result schema">
          <Stack gap={4}>
            <Text size="sm" c="dimmed">
              A JSON Schema the result must match (empty: the model answers text).
            </Text>
            <CodeEditor
              language="json"
              label="Result schema (JSON)"
              value={form.resultSchema}
              onChange={(v) => set("resultSchema", v)}
              invalid={Boolean(errors.resultSchema)}
              testId="result-schema"
              placeholder='{"type": "object", "properties": {…}}'
            />
            <FieldError id="resultSchema" message={errors.resultSchema} />
          </Stack>
        </Fieldset>

        <Fieldset legend="Test data">
          <Stack gap={4}>
            <Text size="sm" c="dimmed">
              Input data for trying the interaction: the playground starts from it.
            </Text>
            <CodeEditor
              language="json"
              label="Test data (JSON)"
              value={form.testData}
              onChange={(v) => set("testData", v)}
              invalid={Boolean(errors.testData)}
              testId="test-data"
            />
            <FieldError id="testData" message={errors.testData} />
          </Stack>
        </Fieldset>

        <Fieldset legend="Model settings">
          <SimpleGrid cols={{ base: 1, sm: 2 }}>
            <Select
              label="Environment"
              placeholder="None"
              data={envOptions}
              value={form.environment || null}
              onChange={(v) => set("environment", v ?? "")}
              clearable
              error={errors.environment}
            />
            <ModelInput
              environment={form.environment}
              value={form.model}
              onChange={(model) => set("model", model)}
              error={errors.model}
            />
            <TextInput
              label="Temperature"
              inputMode="decimal"
              value={form.temperature}
              onChange={(e) => set("temperature", e.currentTarget.value)}
              error={errors.temperature}
            />
            <TextInput
              label="Max tokens"
              inputMode="numeric"
              value={form.maxTokens}
              onChange={(e) => set("maxTokens", e.currentTarget.value)}
              error={errors.maxTokens}
            />
          </SimpleGrid>
        </Fieldset>

        <Group>
          <Button type="submit" loading={saving}>
            {interactionId ? "Save draft" : "Create interaction"}
          </Button>
          {savedAt && (
            <Text size="sm" c="dimmed" role="status" data-testid="saved">
              Saved at {savedAt}
            </Text>
          )}
        </Group>
      </Stack>
    </form>
  );
}

/** The model, offered from the environment's list (`GET /environments/:id/models`); any name goes. */
function ModelInput({
  environment,
  value,
  onChange,
  error,
}: {
  environment: string;
  value: string;
  onChange: (model: string) => void;
  error?: string;
}) {
  const { loaded } = useLoad(async () => {
    if (!environment) return [];
    const answer = await api.GET("/api/v1/environments/{id}/models", {
      params: { path: { id: environment } },
    });
    // Suggestions only: a list the provider does not answer leaves the field free.
    return answer.data?.models ?? [];
  }, [environment]);
  return (
    <Autocomplete
      label="Model"
      description="Empty: the environment's default model"
      data={loaded.state === "ready" ? loaded.data : []}
      value={value}
      onChange={onChange}
      error={error}
    />
  );
}

function SegmentEditor({
  index,
  segment,
  errors,
  count,
  onChange,
  onRemove,
  onMove,
}: {
  index: number;
  segment: SegmentForm;
  errors: FieldErrors;
  count: number;
  onChange: (patch: Partial<SegmentForm>) => void;
  onRemove: () => void;
  onMove: (delta: number) => void;
}) {
  const n = index + 1;
  const err = (field: string) => errors[`segments.${index}.${field}`];
  return (
    <Paper withBorder p="sm" data-testid={`segment-${index}`}>
      <Stack gap="xs">
        <Group justify="space-between" wrap="wrap">
          <Title order={3} size="h5">
            {segment.type === "chat" ? `Prompt ${n}: chat messages` : `Prompt ${n}`}
          </Title>
          <Group gap={4}>
            <Button
              size="compact-xs"
              variant="subtle"
              disabled={index === 0}
              onClick={() => onMove(-1)}
              aria-label={`Move prompt ${n} up`}
            >
              Move up
            </Button>
            <Button
              size="compact-xs"
              variant="subtle"
              disabled={index === count - 1}
              onClick={() => onMove(1)}
              aria-label={`Move prompt ${n} down`}
            >
              Move down
            </Button>
            <Button
              size="compact-xs"
              variant="subtle"
              color="red"
              onClick={onRemove}
              aria-label={`Remove prompt ${n}`}
            >
              Remove
            </Button>
          </Group>
        </Group>
        {segment.type === "chat" ? (
          <TextInput
            label="Path of the messages in the data"
            description="An array of {role, content} in the input data"
            value={segment.chatPath}
            onChange={(e) => onChange({ chatPath: e.currentTarget.value })}
            error={err("chatPath")}
          />
        ) : (
          <>
            <SimpleGrid cols={{ base: 1, sm: 3 }}>
              <TextInput
                label={`Template name (prompt ${n})`}
                placeholder="Named after the interaction"
                value={segment.name}
                onChange={(e) => onChange({ name: e.currentTarget.value })}
              />
              <Select
                label={`Role (prompt ${n})`}
                data={[...ROLES]}
                value={segment.role}
                onChange={(v) => v && onChange({ role: v })}
                allowDeselect={false}
              />
              <Select
                label={`Content type (prompt ${n})`}
                data={CONTENT_TYPES.map((t) => ({
                  value: t,
                  label: t === "jst" ? "jst (JavaScript)" : t,
                }))}
                value={segment.contentType}
                onChange={(v) => v && onChange({ contentType: v })}
                allowDeselect={false}
              />
            </SimpleGrid>
            <CodeEditor
              language={segment.contentType as "jst" | "handlebars" | "text"}
              label={`Prompt ${n} template`}
              value={segment.content}
              onChange={(content) => onChange({ content })}
              invalid={Boolean(err("content"))}
              testId={`prompt-${index}`}
              placeholder={
                segment.contentType === "jst"
                  ? "return `Summarise ${text}`"
                  : segment.contentType === "handlebars"
                    ? "Summarise {{text}}"
                    : "Plain text"
              }
            />
            <FieldError id={`segments-${index}-content`} message={err("content")} />
            <Text size="sm" fw={500}>
              Input schema (prompt {n})
            </Text>
            <CodeEditor
              language="json"
              label={`Prompt ${n} input schema (JSON)`}
              value={segment.inputSchema}
              onChange={(inputSchema) => onChange({ inputSchema })}
              invalid={Boolean(err("inputSchema"))}
              testId={`input-schema-${index}`}
              placeholder='{"type": "object", "properties": {"text": {"type": "string"}}}'
            />
            <FieldError id={`segments-${index}-inputSchema`} message={err("inputSchema")} />
          </>
        )}
      </Stack>
    </Paper>
  );
}
