import type { paths } from "../api/schema";
import { parseJson, pretty } from "../ui/format";

/** An interaction (or a version) as `GET /interactions/:id` answers it. */
export type Interaction =
  paths["/api/v1/interactions/{id}"]["get"]["responses"][200]["content"]["application/json"];
/** A line of `GET /interactions`. */
export type InteractionRef =
  paths["/api/v1/interactions"]["get"]["responses"][200]["content"]["application/json"][number];
/** A line of `GET /interactions/:id/versions`. */
export type VersionRef =
  paths["/api/v1/interactions/{id}/versions"]["get"]["responses"][200]["content"]["application/json"][number];
/** What `PUT` and `POST /interactions` take. */
export type InteractionBody =
  paths["/api/v1/interactions/{id}"]["put"]["requestBody"]["content"]["application/json"];
type Segment = Interaction["prompts"][number];
export type Template = Exclude<NonNullable<Segment["template"]>, string>;

export const CONTENT_TYPES = ["jst", "handlebars", "text"] as const;
export const ROLES = ["system", "user", "assistant", "safety", "negative"] as const;

/** One prompt segment as the editor holds it (JSON as text, so that a typo stays editable). */
export interface SegmentForm {
  /** React's key: stable across edits. */
  key: string;
  type: "template" | "chat";
  chatPath: string;
  /** The template's id when it exists (its edits go to `PUT /prompts/:id`). */
  templateId?: string;
  name: string;
  role: string;
  contentType: string;
  content: string;
  inputSchema: string;
  /** The template as loaded: saving writes only the templates that changed. */
  saved?: string;
}

export interface DraftForm {
  name: string;
  description: string;
  environment: string;
  model: string;
  temperature: string;
  maxTokens: string;
  resultSchema: string;
  testData: string;
  segments: SegmentForm[];
}

let keys = 0;
const nextKey = () => `segment-${++keys}`;

export function newSegment(): SegmentForm {
  return {
    key: nextKey(),
    type: "template",
    chatPath: "",
    name: "",
    role: "user",
    contentType: "jst",
    content: "",
    inputSchema: "",
  };
}

export function emptyDraft(): DraftForm {
  return {
    name: "",
    description: "",
    environment: "",
    model: "",
    temperature: "",
    maxTokens: "",
    resultSchema: "",
    testData: "",
    segments: [newSegment()],
  };
}

const templateState = (s: SegmentForm) =>
  JSON.stringify([s.name, s.role, s.contentType, s.content, s.inputSchema]);

export function toForm(interaction: Interaction): DraftForm {
  return {
    name: interaction.name,
    description: interaction.description ?? "",
    environment: interaction.environment ?? "",
    model: interaction.model ?? "",
    temperature: interaction.temperature === undefined ? "" : String(interaction.temperature),
    maxTokens: interaction.max_tokens === undefined ? "" : String(interaction.max_tokens),
    resultSchema: pretty(interaction.resultSchema),
    testData: pretty(interaction.test_data),
    segments: interaction.prompts.map((segment) => {
      const template = typeof segment.template === "object" ? segment.template : undefined;
      const form: SegmentForm = {
        key: nextKey(),
        type: segment.type === "chat" ? "chat" : "template",
        chatPath: segment.chat_path ?? "",
        templateId:
          template?.id ?? (typeof segment.template === "string" ? segment.template : undefined),
        name: template?.name ?? "",
        role: template?.role ?? "user",
        contentType: template?.content_type ?? "jst",
        content: template?.content ?? "",
        inputSchema: pretty(template?.inputSchema),
      };
      form.saved = templateState(form);
      return form;
    }),
  };
}

/** Errors by field: `name`, `resultSchema`, `testData`, `temperature`, `segments.2.inputSchema`… */
export type FieldErrors = Record<string, string>;

export interface Prepared {
  body: InteractionBody;
  /** Templates to write first (`PUT /prompts/:id`), with their segment's index. */
  templates: { index: number; id: string; body: Record<string, unknown> }[];
}

/** The requests that save a form, or the errors found before sending anything. */
export function prepare(form: DraftForm): { prepared?: Prepared; errors: FieldErrors } {
  const errors: FieldErrors = {};
  if (!form.name.trim()) errors.name = "An interaction needs a name.";
  if (form.name.includes("@")) errors.name = "A name cannot contain @.";
  const number = (field: string, text: string, integer: boolean) => {
    if (!text.trim()) return undefined;
    const value = Number(text);
    if (!Number.isFinite(value) || (integer && !Number.isInteger(value)) || value < 0) {
      errors[field] = integer ? "A whole number of tokens." : "A number, such as 0.7.";
      return undefined;
    }
    return value;
  };
  const temperature = number("temperature", form.temperature, false);
  const maxTokens = number("maxTokens", form.maxTokens, true);
  const object = (field: string, text: string) => {
    const parsed = parseJson(text);
    if (parsed.error) errors[field] = parsed.error;
    else if (
      parsed.value !== undefined &&
      (typeof parsed.value !== "object" || parsed.value === null || Array.isArray(parsed.value))
    ) {
      errors[field] = "A JSON object ({…}).";
    }
    return parsed.value as Record<string, unknown> | undefined;
  };
  const resultSchema = object("resultSchema", form.resultSchema);
  const testData = object("testData", form.testData);
  if (form.segments.length === 0) errors.segments = "An interaction needs at least one prompt.";

  const templates: Prepared["templates"] = [];
  const prompts = form.segments.map((segment, index) => {
    if (segment.type === "chat") {
      if (!segment.chatPath.trim()) errors[`segments.${index}.chatPath`] = "The data's path.";
      return { type: "chat", chat_path: segment.chatPath.trim() };
    }
    const inputSchema = object(`segments.${index}.inputSchema`, segment.inputSchema);
    if (!segment.content.trim()) errors[`segments.${index}.content`] = "The prompt is empty.";
    const template = {
      name: segment.name.trim() || `${form.name.trim()} prompt ${index + 1}`,
      role: segment.role,
      content_type: segment.contentType,
      content: segment.content,
      inputSchema: inputSchema ?? null,
    };
    if (!segment.templateId) return { type: "template", template };
    if (segment.saved !== templateState(segment)) {
      templates.push({ index, id: segment.templateId, body: template });
    }
    return { type: "template", template: segment.templateId };
  });
  if (Object.keys(errors).length > 0) return { errors };
  return {
    errors,
    prepared: {
      templates,
      body: {
        name: form.name.trim(),
        description: form.description,
        ...(form.environment ? { environment: form.environment } : {}),
        ...(form.model.trim() ? { model: form.model.trim() } : {}),
        ...(temperature !== undefined ? { temperature } : {}),
        ...(maxTokens !== undefined ? { max_tokens: maxTokens } : {}),
        result_schema: resultSchema ?? null,
        test_data: testData ?? null,
        prompts,
      },
    },
  };
}

/**
 * Where a 400's message belongs: the API names the field first (`resultSchema: not a valid JSON
 * Schema: …`, `body/name …`); anything else is shown above the form.
 */
export function fieldOfMessage(message: string): string | undefined {
  const match = /^(?:body[/.])?([A-Za-z_]+)\b/.exec(message);
  const field = match?.[1];
  const fields: Record<string, string> = {
    resultSchema: "resultSchema",
    result_schema: "resultSchema",
    schema: "resultSchema",
    test_data: "testData",
    name: "name",
    temperature: "temperature",
    max_tokens: "maxTokens",
    model: "model",
    environment: "environment",
  };
  return field ? fields[field] : undefined;
}
