import type {
  ChatCompletion,
  ChatCompletionChunk,
  ChatCompletionCreateParams,
} from "openai/resources/chat/completions";
import type { CompletionUsage } from "openai/resources/completions";
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
  jsonHeaders,
  type ProviderHttpOptions,
  type StreamState,
  type Wire,
} from "./http-client.js";
import type { CompletionRequest, CompletionResult } from "./types.js";

/** Where an environment without an endpoint URL goes (the openai SDK's default). */
const DEFAULT_BASE_URL = "https://api.openai.com/v1";

/**
 * OpenAI's chat completions, and every OpenAI-compatible endpoint's: `POST {base}/chat/completions`
 * with a bearer key; streamed with `stream_options.include_usage`, `data: [DONE]` at the end.
 */
export class OpenAIClient extends HttpProviderClient {
  constructor(environment: Environment, apiKey: string, options: ProviderHttpOptions) {
    const url = joinUrl(environment.endpointUrl || DEFAULT_BASE_URL, "chat/completions");
    super(
      chatCompletionsWire(environment, () => url, [
        // Local OpenAI-compatible servers often take no key; "none" is what the SDK made us send.
        // Trimmed, as the SDK's WHATWG Headers did: a key pasted with its line end still works
        // (undici refuses a header value with a CR or LF in it).
        "authorization",
        `Bearer ${apiKey.trim() || "none"}`,
      ]),
      options,
    );
  }
}

/** The chat-completions wire, at the URL and with the key headers of its provider. */
export function chatCompletionsWire(
  environment: Environment,
  url: Wire["url"],
  keyHeaders: string[],
): Wire {
  // Whether the output schema goes as the response format (else it is asked for in the prompt).
  const structuredOutput = configOf(environment).structured_output !== false;
  return {
    url,
    headers: jsonHeaders(...keyHeaders),
    body: (request, streamed) => JSON.stringify(params(request, streamed, structuredOutput)),
    completion,
    event,
  };
}

function params(
  request: CompletionRequest,
  streamed: boolean,
  structuredOutput: boolean,
): ChatCompletionCreateParams {
  // The schema itself when it is sent as the response format.
  const structured = structuredOutput ? request.schema : undefined;
  return {
    model: request.model,
    messages: request.schema && !structured ? withSchemaAsked(request) : request.messages,
    ...(request.temperature !== undefined ? { temperature: request.temperature } : {}),
    ...(request.maxTokens !== undefined ? { max_tokens: request.maxTokens } : {}),
    ...(structured
      ? {
          response_format: {
            type: "json_schema" as const,
            json_schema: { name: "result", schema: structured },
          },
        }
      : {}),
    ...(streamed ? { stream: true, stream_options: { include_usage: true } } : {}),
  };
}

/**
 * The messages with the output schema asked for in a last system message: for a provider whose
 * own schema mechanism an environment turns off (`config.structured_output: false`).
 */
export function withSchemaAsked(request: CompletionRequest): ChatMessage[] {
  return [
    ...request.messages,
    {
      role: "system",
      content:
        "Answer with JSON only, that validates against this JSON Schema:\n" +
        JSON.stringify(request.schema),
    },
  ];
}

function usageOf(usage: CompletionUsage | null | undefined) {
  if (!usage) return undefined;
  return {
    prompt: usage.prompt_tokens,
    result: usage.completion_tokens,
    total: usage.total_tokens,
  };
}

function completion(json: unknown): CompletionResult {
  const answer = json as ChatCompletion | null;
  if (!Array.isArray(answer?.choices)) throw notAnAnswer(json, "a chat completion");
  return {
    content: answer.choices[0]?.message?.content ?? "",
    usage: usageOf(answer.usage),
  };
}

function event(data: string, type: string, state: StreamState): string | typeof DONE {
  if (data.startsWith("[DONE]")) return DONE;
  const chunk = eventJson(data) as ChatCompletionChunk;
  const error = errorOf(chunk);
  if (error || type === "error") {
    throw new BadAnswer(`the provider reported an error: ${cut(error ?? data)}`);
  }
  if (chunk.usage) state.usage = usageOf(chunk.usage);
  return chunk.choices?.[0]?.delta?.content ?? "";
}
