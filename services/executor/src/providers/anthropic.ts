import type { Environment } from "@pies/proto/catalog";
import { configOf } from "../catalog-payloads.js";
import type { ChatMessage } from "../templates/render.js";
import {
  BadAnswer,
  cut,
  DONE,
  errorOf,
  eventJson,
  HttpProviderClient,
  joinUrl,
  notAnAnswer,
  TransientAnswer,
  jsonHeaders,
  type ProviderHttpOptions,
  type StreamState,
  type Wire,
} from "./http-client.js";
import { withSchemaAsked } from "./openai.js";
import type { CompletionRequest, CompletionResult, TokenUsage } from "./types.js";

/** Where an environment without an endpoint URL goes (the SDK's default). */
const DEFAULT_BASE_URL = "https://api.anthropic.com";
/** The Messages API's version header: the one every current model speaks. */
const API_VERSION = "2023-06-01";
/**
 * `max_tokens` when neither the request nor the interaction sets one: the Messages API requires
 * it. Enough for any structured answer; the provider bills what is generated, not this bound.
 */
export const DEFAULT_MAX_TOKENS = 4096;

/**
 * Anthropic's Messages API, natively: `POST {base}/v1/messages` with `x-api-key` and
 * `anthropic-version`; the system messages go in `system`, the output schema in
 * `output_config.format` (`config.structured_output: false` asks for it in the prompt instead, for
 * a model without structured outputs); streamed as `message_start`, `content_block_delta`,
 * `message_delta` (the output tokens) and `message_stop` events, an `error` event failing the call.
 */
export class AnthropicClient extends HttpProviderClient {
  constructor(environment: Environment, apiKey: string, options: ProviderHttpOptions) {
    super(anthropicWire(environment, apiKey), options);
  }
}

function anthropicWire(environment: Environment, apiKey: string): Wire {
  const url = joinUrl(environment.endpointUrl || DEFAULT_BASE_URL, "v1/messages");
  const structuredOutput = configOf(environment).structured_output !== false;
  return {
    url: () => url,
    headers: jsonHeaders("anthropic-version", API_VERSION, "x-api-key", apiKey.trim()),
    body: (request, streamed) => JSON.stringify(params(request, streamed, structuredOutput)),
    completion,
    event,
  };
}

interface MessagesParams {
  model: string;
  max_tokens: number;
  system?: string;
  messages: { role: "user" | "assistant"; content: string }[];
  temperature?: number;
  output_config?: { format: { type: "json_schema"; schema: unknown } };
  stream?: true;
}

/** The request's messages as the Messages API takes them: the system ones apart, in order. */
function params(
  request: CompletionRequest,
  streamed: boolean,
  structuredOutput: boolean,
): MessagesParams {
  const structured = structuredOutput ? request.schema : undefined;
  const all: ChatMessage[] =
    request.schema && !structured ? withSchemaAsked(request) : request.messages;
  const system: string[] = [];
  const messages: MessagesParams["messages"] = [];
  for (const m of all) {
    if (m.role === "system") system.push(m.content);
    else messages.push({ role: m.role === "assistant" ? "assistant" : "user", content: m.content });
  }
  // A prompt of system messages alone: the Messages API needs a message, so they are the user's.
  if (messages.length === 0 && system.length > 0) {
    messages.push({ role: "user", content: system.splice(0).join("\n\n") });
  }
  return {
    model: request.model,
    max_tokens: request.maxTokens ?? DEFAULT_MAX_TOKENS,
    ...(system.length > 0 ? { system: system.join("\n\n") } : {}),
    messages,
    ...(request.temperature !== undefined
      ? // Anthropic's range is 0–1 where OpenAI's is 0–2: a temperature above 1 is its top.
        { temperature: Math.min(request.temperature, 1) }
      : {}),
    ...(structured
      ? { output_config: { format: { type: "json_schema" as const, schema: structured } } }
      : {}),
    ...(streamed ? { stream: true as const } : {}),
  };
}

interface AnthropicUsage {
  input_tokens?: number;
  output_tokens?: number;
  cache_creation_input_tokens?: number | null;
  cache_read_input_tokens?: number | null;
}

/** The prompt's tokens: those read from and written to the prompt cache count as prompt too. */
const promptTokens = (u: AnthropicUsage) =>
  (u.input_tokens ?? 0) + (u.cache_creation_input_tokens ?? 0) + (u.cache_read_input_tokens ?? 0);

function usageOf(u: AnthropicUsage | undefined): TokenUsage | undefined {
  if (!u) return undefined;
  const prompt = promptTokens(u);
  const result = u.output_tokens ?? 0;
  return { prompt, result, total: prompt + result };
}

interface Message {
  type?: string;
  content?: { type: string; text?: string }[];
  usage?: AnthropicUsage;
}

function completion(json: unknown): CompletionResult {
  const message = json as Message | null;
  if (message?.type !== "message" || !Array.isArray(message.content)) {
    throw notAnAnswer(json, "a message");
  }
  return {
    content: message.content
      .map((block) => (block.type === "text" ? (block.text ?? "") : ""))
      .join(""),
    usage: usageOf(message.usage),
  };
}

/** The error types of Anthropic's API that are the provider's, not the request's. */
const TRANSIENT_ERRORS = new Set([
  "overloaded_error",
  "api_error",
  "rate_limit_error",
  "timeout_error",
]);

interface StreamEvent {
  type?: string;
  message?: Message;
  delta?: { type?: string; text?: string };
  usage?: AnthropicUsage;
}

function event(data: string, type: string, state: StreamState): string | typeof DONE {
  const e = eventJson(data) as StreamEvent;
  const kind = e?.type ?? type;
  switch (kind) {
    case "message_start": {
      state.usage = usageOf(e.message?.usage);
      return "";
    }
    case "content_block_delta":
      return e.delta?.type === "text_delta" ? (e.delta.text ?? "") : "";
    case "message_delta": {
      // The output tokens so far (cumulative); the input tokens came with message_start.
      if (e.usage) {
        const prompt = state.usage?.prompt ?? promptTokens(e.usage);
        const result = e.usage.output_tokens ?? 0;
        state.usage = { prompt, result, total: prompt + result };
      }
      return "";
    }
    case "message_stop":
      return DONE;
    case "error": {
      const message = `the provider reported an error: ${cut(errorOf(e) ?? data)}`;
      // Overloaded, rate limited, its own failure: another attempt may not meet it.
      const type = (e as { error?: { type?: unknown } }).error?.type;
      throw TRANSIENT_ERRORS.has(String(type))
        ? new TransientAnswer(message)
        : new BadAnswer(message);
    }
    default:
      // ping, content_block_start, content_block_stop, and kinds added later.
      return "";
  }
}
