/**
 * The wire protocols the fake provider server speaks (fake-openai.ts): each reads its requests
 * into the chat-completions body the fake works on, and writes answers, streamed events and error
 * bodies as that provider does. The shapes follow the providers' API references:
 * - `openai`: `POST /v1/chat/completions`, `Authorization: Bearer`;
 * - `azure_openai`: `POST /openai/deployments/{deployment}/chat/completions?api-version=…`,
 *   `api-key`; the deployment is the model;
 * - `anthropic`: `POST /v1/messages`, `x-api-key` and `anthropic-version`; `system` apart,
 *   `max_tokens` required, the schema in `output_config.format`; streamed as `message_start`,
 *   `content_block_start`, `content_block_delta`…, `content_block_stop`, `message_delta` (usage),
 *   `message_stop`, errors as `{"type":"error","error":{type,message}}` (an `error` event in a
 *   stream);
 * - `google`: `POST /v1beta/models/{model}:generateContent` or `:streamGenerateContent?alt=sse`,
 *   `x-goog-api-key` (or `?key=`); `contents` with roles user and model, `systemInstruction`,
 *   `generationConfig.responseJsonSchema`; each streamed event a partial answer with the usage so
 *   far; errors as `{"error":{code,message,status}}`.
 */
import { randomUUID } from "node:crypto";
import type { IncomingHttpHeaders } from "node:http";

/** The subset of a chat-completions request body the fake looks at. */
export interface ChatCompletionRequestBody {
  model: string;
  messages: ChatMessage[];
  stream?: boolean | null;
  stream_options?: { include_usage?: boolean | null } | null;
  response_format?:
    | { type: "text" }
    | { type: "json_object" }
    | {
        type: "json_schema";
        json_schema: {
          name?: string;
          schema?: unknown;
          strict?: boolean | null;
        };
      }
    | null;
  [key: string]: unknown;
}

/** A chat message; `content` is a string, an array of content parts, or null. */
export interface ChatMessage {
  role: string;
  content?: string | Array<{ type: string; text?: string }> | null;
  [key: string]: unknown;
}

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

/** What kind of failure an error body says. */
export type ErrorKind = "invalid" | "auth" | "not_found" | "rate_limit" | "server" | "too_large";

/** A completion the fake made, to be written in the wire's shape. */
export interface Answer {
  id: string;
  model: string;
  content: string;
  usage: Usage;
}

export type WireName = "openai" | "azure_openai" | "anthropic" | "google";

export interface FakeWire {
  name: WireName;
  /** Whether the request carries `apiKey` as this provider takes it. */
  authorized(headers: IncomingHttpHeaders, query: URLSearchParams, apiKey: string): boolean;
  /** The request as a chat-completions body, or the 400 message that refuses it. */
  chat(body: unknown, route: Route): ChatCompletionRequestBody | { invalid: string };
  /** An error body, as the provider writes one. */
  error(status: number, message: string, kind: ErrorKind): unknown;
  /** A blocking answer. */
  answer(answer: Answer, chat: ChatCompletionRequestBody): unknown;
  /**
   * A streamed answer's SSE frames: `pieces` the content in chunks; `first` the index of the
   * frame holding the first piece (what a stream dropped mid-way sends, with the frames before).
   */
  events(answer: Answer, pieces: string[], chat: ChatCompletionRequestBody): Frames;
  /** The frame of an error reported inside a stream. */
  errorEvent(message: string): string;
}

export interface Frames {
  frames: string[];
  first: number;
}

/** A request's wire, from its method and path; the model when the path names it. */
export interface Route {
  wire: FakeWire;
  model?: string;
  streamed?: boolean;
}

export function routeOf(method: string, path: string, query: URLSearchParams): Route | undefined {
  if (method !== "POST") return undefined;
  if (path === "/v1/chat/completions" || path === "/chat/completions") return { wire: openai };
  if (path === "/v1/messages") return { wire: anthropic };
  const azure = /^\/openai\/deployments\/([^/]+)\/chat\/completions$/.exec(path);
  if (azure?.[1] && query.has("api-version")) {
    return { wire: azureOpenai, model: decodeURIComponent(azure[1]) };
  }
  const google = /^\/v1(?:beta)?\/models\/([^/:]+):(generateContent|streamGenerateContent)$/.exec(
    path,
  );
  if (google?.[1]) {
    return {
      wire: googleWire,
      model: decodeURIComponent(google[1]),
      streamed: google[2] === "streamGenerateContent",
    };
  }
  return undefined;
}

export const sse = (payload: unknown, event?: string): string =>
  `${event ? `event: ${event}\n` : ""}data: ${JSON.stringify(payload)}\n\n`;

const isRecord = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v);

/** The body's messages, checked as chat messages. */
function chatBody(body: unknown, model?: string): ChatCompletionRequestBody | { invalid: string } {
  if (!isRecord(body)) return { invalid: "The request body must be a JSON object." };
  const named = model ?? body.model;
  if (typeof named !== "string" || named === "") {
    return { invalid: "you must provide a model parameter" };
  }
  if (!Array.isArray(body.messages) || !body.messages.every(isRecord)) {
    return { invalid: "'messages' must be an array of message objects." };
  }
  return { ...body, model: named } as ChatCompletionRequestBody;
}

const openAIError = (message: string, kind: ErrorKind) => ({
  error: {
    message,
    type:
      kind === "server"
        ? "server_error"
        : kind === "rate_limit"
          ? "rate_limit_exceeded"
          : "invalid_request_error",
    param: null,
    code:
      kind === "auth" ? "invalid_api_key" : kind === "rate_limit" ? "rate_limit_exceeded" : null,
  },
});

function chatCompletion(a: Answer) {
  return {
    id: a.id,
    object: "chat.completion",
    created: Math.floor(Date.now() / 1000),
    model: a.model,
    choices: [
      {
        index: 0,
        message: { role: "assistant", content: a.content, refusal: null },
        logprobs: null,
        finish_reason: "stop",
      },
    ],
    usage: a.usage,
    system_fingerprint: "fp_pies_fake",
  };
}

function chatChunks(a: Answer, pieces: string[], chat: ChatCompletionRequestBody): Frames {
  const includeUsage = chat.stream_options?.include_usage === true;
  const envelope = {
    id: a.id,
    object: "chat.completion.chunk",
    created: Math.floor(Date.now() / 1000),
    model: a.model,
    system_fingerprint: "fp_pies_fake",
  };
  // Real OpenAI puts `usage: null` on every chunk when usage was requested.
  const chunk = (delta: Record<string, unknown>, finish: string | null): string =>
    sse({
      ...envelope,
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
      ...(includeUsage ? { usage: null } : {}),
    });
  const frames = [chunk({ role: "assistant", content: "", refusal: null }, null)];
  for (const piece of pieces) frames.push(chunk({ content: piece }, null));
  frames.push(chunk({}, "stop"));
  if (includeUsage) frames.push(sse({ ...envelope, choices: [], usage: a.usage }));
  frames.push("data: [DONE]\n\n");
  return { frames, first: 1 };
}

export const openai: FakeWire = {
  name: "openai",
  authorized: (headers, _query, key) => headers.authorization === `Bearer ${key}`,
  chat: (body) => chatBody(body),
  error: (_status, message, kind) => openAIError(message, kind),
  answer: chatCompletion,
  events: chatChunks,
  errorEvent: (message) => sse({ error: { message, type: "server_error" } }),
};

const azureOpenai: FakeWire = {
  ...openai,
  name: "azure_openai",
  authorized: (headers, _query, key) => headers["api-key"] === key,
  // The deployment in the path is the model, whatever the body says.
  chat: (body, route) => chatBody(body, route.model),
};

// ---------------------------------------------------------------------------------------------
// Anthropic

const anthropicErrorType: Record<ErrorKind, string> = {
  invalid: "invalid_request_error",
  auth: "authentication_error",
  not_found: "not_found_error",
  rate_limit: "rate_limit_error",
  server: "api_error",
  too_large: "request_too_large",
};

/** The text of an Anthropic content: a string, or blocks of which the text ones count. */
function blocksText(content: unknown): string | undefined {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return undefined;
  return content
    .map((b) => (isRecord(b) && b.type === "text" && typeof b.text === "string" ? b.text : ""))
    .join("");
}

const anthropic: FakeWire = {
  name: "anthropic",
  authorized: (headers, _query, key) => headers["x-api-key"] === key,
  chat(body) {
    if (!isRecord(body)) return { invalid: "The request body must be a JSON object." };
    if (typeof body.model !== "string" || !body.model) return { invalid: "model: Field required" };
    if (typeof body.max_tokens !== "number") return { invalid: "max_tokens: Field required" };
    if (!Array.isArray(body.messages) || body.messages.length === 0) {
      return { invalid: "messages: at least one message is required" };
    }
    const messages: ChatMessage[] = [];
    if (body.system !== undefined) {
      const system = blocksText(body.system);
      if (system === undefined) return { invalid: "system: Input should be a valid string" };
      messages.push({ role: "system", content: system });
    }
    for (const [i, m] of body.messages.entries()) {
      const text = isRecord(m) ? blocksText(m.content) : undefined;
      if (!isRecord(m) || (m.role !== "user" && m.role !== "assistant") || text === undefined) {
        return { invalid: `messages.${i}: a message is {role: user | assistant, content}` };
      }
      messages.push({ role: m.role, content: text });
    }
    const config = isRecord(body.output_config) ? body.output_config : undefined;
    const format = isRecord(config?.format) ? config.format : undefined;
    if (format && format.type !== "json_schema") {
      return { invalid: "output_config.format.type: must be json_schema" };
    }
    return {
      model: body.model,
      messages,
      stream: body.stream === true,
      ...(format
        ? { response_format: { type: "json_schema", json_schema: { schema: format.schema } } }
        : {}),
    };
  },
  error: (_status, message, kind) => ({
    type: "error",
    error: { type: anthropicErrorType[kind], message },
  }),
  answer: (a) => ({
    id: `msg_${a.id}`,
    type: "message",
    role: "assistant",
    model: a.model,
    content: [{ type: "text", text: a.content }],
    stop_reason: "end_turn",
    stop_sequence: null,
    usage: { input_tokens: a.usage.prompt_tokens, output_tokens: a.usage.completion_tokens },
  }),
  events(a, pieces) {
    const frames = [
      sse(
        {
          type: "message_start",
          message: {
            id: `msg_${a.id}`,
            type: "message",
            role: "assistant",
            model: a.model,
            content: [],
            stop_reason: null,
            stop_sequence: null,
            usage: { input_tokens: a.usage.prompt_tokens, output_tokens: 1 },
          },
        },
        "message_start",
      ),
      sse(
        { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
        "content_block_start",
      ),
      sse({ type: "ping" }, "ping"),
    ];
    const first = frames.length;
    for (const text of pieces) {
      frames.push(
        sse(
          { type: "content_block_delta", index: 0, delta: { type: "text_delta", text } },
          "content_block_delta",
        ),
      );
    }
    frames.push(
      sse({ type: "content_block_stop", index: 0 }, "content_block_stop"),
      sse(
        {
          type: "message_delta",
          delta: { stop_reason: "end_turn", stop_sequence: null },
          usage: { output_tokens: a.usage.completion_tokens },
        },
        "message_delta",
      ),
      sse({ type: "message_stop" }, "message_stop"),
    );
    return { frames, first };
  },
  errorEvent: (message) =>
    sse({ type: "error", error: { type: "overloaded_error", message } }, "error"),
};

// ---------------------------------------------------------------------------------------------
// Google (Gemini)

const googleStatus: Record<ErrorKind, string> = {
  invalid: "INVALID_ARGUMENT",
  auth: "PERMISSION_DENIED",
  not_found: "NOT_FOUND",
  rate_limit: "RESOURCE_EXHAUSTED",
  server: "INTERNAL",
  too_large: "INVALID_ARGUMENT",
};

function partsText(parts: unknown): string | undefined {
  if (!Array.isArray(parts)) return undefined;
  return parts.map((p) => (isRecord(p) && typeof p.text === "string" ? p.text : "")).join("");
}

const googleUsage = (u: Usage) => ({
  promptTokenCount: u.prompt_tokens,
  candidatesTokenCount: u.completion_tokens,
  totalTokenCount: u.total_tokens,
});

const googleWire: FakeWire = {
  name: "google",
  authorized: (headers, query, key) =>
    headers["x-goog-api-key"] === key || query.get("key") === key,
  chat(body, route) {
    if (!isRecord(body)) return { invalid: "Invalid JSON payload received." };
    if (!Array.isArray(body.contents) || body.contents.length === 0) {
      return { invalid: "* GenerateContentRequest.contents: contents is not specified" };
    }
    const messages: ChatMessage[] = [];
    if (body.systemInstruction !== undefined) {
      const system = isRecord(body.systemInstruction)
        ? partsText(body.systemInstruction.parts)
        : undefined;
      if (system === undefined) return { invalid: "systemInstruction: parts are required" };
      messages.push({ role: "system", content: system });
    }
    for (const [i, c] of body.contents.entries()) {
      const text = isRecord(c) ? partsText(c.parts) : undefined;
      if (!isRecord(c) || (c.role !== "user" && c.role !== "model") || text === undefined) {
        return { invalid: `* GenerateContentRequest.contents[${i}]: role must be user or model` };
      }
      messages.push({ role: c.role === "model" ? "assistant" : "user", content: text });
    }
    const config = isRecord(body.generationConfig) ? body.generationConfig : {};
    const schema = config.responseJsonSchema ?? config.responseSchema;
    if (schema !== undefined && config.responseMimeType !== "application/json") {
      return { invalid: "responseMimeType must be application/json with a response schema" };
    }
    return {
      model: route.model ?? "",
      messages,
      stream: route.streamed === true,
      ...(schema !== undefined
        ? { response_format: { type: "json_schema", json_schema: { schema } } }
        : config.responseMimeType === "application/json"
          ? { response_format: { type: "json_object" } }
          : {}),
    };
  },
  error: (status, message, kind) => ({
    error: { code: status, message, status: googleStatus[kind] },
  }),
  answer: (a) => ({
    candidates: [
      { content: { role: "model", parts: [{ text: a.content }] }, finishReason: "STOP", index: 0 },
    ],
    usageMetadata: googleUsage(a.usage),
    modelVersion: a.model,
    responseId: a.id,
  }),
  events(a, pieces) {
    const frames = pieces.map((text, i) =>
      sse({
        candidates: [
          {
            content: { role: "model", parts: [{ text }] },
            index: 0,
            ...(i === pieces.length - 1 ? { finishReason: "STOP" } : {}),
          },
        ],
        // The usage so far on each event: the prompt's, then the whole answer's on the last.
        usageMetadata:
          i === pieces.length - 1
            ? googleUsage(a.usage)
            : { promptTokenCount: a.usage.prompt_tokens, totalTokenCount: a.usage.prompt_tokens },
        modelVersion: a.model,
        responseId: a.id,
      }),
    );
    if (frames.length === 0) {
      frames.push(
        sse({
          candidates: [{ content: { role: "model", parts: [{ text: "" }] }, finishReason: "STOP" }],
          usageMetadata: googleUsage(a.usage),
          modelVersion: a.model,
        }),
      );
    }
    return { frames, first: 0 };
  },
  errorEvent: (message) => sse({ error: { code: 500, message, status: "INTERNAL" } }),
};

export const newAnswerId = () => randomUUID().replaceAll("-", "");
