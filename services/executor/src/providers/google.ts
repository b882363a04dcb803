import type { Environment } from "@pies/proto/catalog";
import { configOf } from "../catalog-payloads.js";
import type { ChatMessage } from "../templates/render.js";
import {
  BadAnswer,
  cut,
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
import { withSchemaAsked } from "./openai.js";
import type { CompletionRequest, CompletionResult, TokenUsage } from "./types.js";

/** Where an environment without an endpoint URL goes: the Gemini API. */
const DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com";
/** The API version in the path when the environment names none (`config.api_version`). */
const DEFAULT_API_VERSION = "v1beta";

/**
 * Google's Gemini API, natively: `POST {base}/{version}/models/{model}:generateContent`, or
 * `:streamGenerateContent?alt=sse` (each event a partial answer, the usage in the last), with the
 * key in `x-goog-api-key`. The system messages go in `systemInstruction`; the output schema, a
 * JSON Schema, in `generationConfig.responseJsonSchema` with `responseMimeType: application/json`
 * (`config.structured_output: false` asks for it in the prompt instead).
 */
export class GoogleClient extends HttpProviderClient {
  constructor(environment: Environment, apiKey: string, options: ProviderHttpOptions) {
    super(googleWire(environment, apiKey), options);
  }
}

function googleWire(environment: Environment, apiKey: string): Wire {
  const config = configOf(environment);
  const version =
    typeof config.api_version === "string" && config.api_version
      ? config.api_version
      : DEFAULT_API_VERSION;
  const base = environment.endpointUrl || DEFAULT_BASE_URL;
  const structuredOutput = config.structured_output !== false;
  return {
    url: (request, streamed) =>
      joinUrl(
        base,
        // A model named as the API lists it ("models/gemini-…") or by its id alone.
        `${version}/models/${encodeURIComponent(request.model.replace(/^models\//, ""))}:${
          streamed ? "streamGenerateContent" : "generateContent"
        }`,
        streamed ? { alt: "sse" } : {},
      ),
    headers: jsonHeaders("x-goog-api-key", apiKey.trim()),
    body: (request) => JSON.stringify(params(request, structuredOutput)),
    completion,
    event,
  };
}

interface GenerateContentParams {
  contents: { role: "user" | "model"; parts: { text: string }[] }[];
  systemInstruction?: { parts: { text: string }[] };
  generationConfig: {
    temperature?: number;
    maxOutputTokens?: number;
    responseMimeType?: "application/json";
    responseJsonSchema?: unknown;
  };
}

function params(request: CompletionRequest, structuredOutput: boolean): GenerateContentParams {
  const structured = structuredOutput ? request.schema : undefined;
  const all: ChatMessage[] =
    request.schema && !structured ? withSchemaAsked(request) : request.messages;
  const system: { text: string }[] = [];
  const contents: GenerateContentParams["contents"] = [];
  for (const m of all) {
    if (m.role === "system") system.push({ text: m.content });
    else
      contents.push({
        role: m.role === "assistant" ? "model" : "user",
        parts: [{ text: m.content }],
      });
  }
  // A prompt of system messages alone: Gemini needs contents, so they are the user's.
  if (contents.length === 0 && system.length > 0) {
    contents.push({ role: "user", parts: system.splice(0) });
  }
  return {
    contents,
    ...(system.length > 0 ? { systemInstruction: { parts: system } } : {}),
    generationConfig: {
      ...(request.temperature !== undefined ? { temperature: request.temperature } : {}),
      ...(request.maxTokens !== undefined ? { maxOutputTokens: request.maxTokens } : {}),
      ...(structured
        ? { responseMimeType: "application/json" as const, responseJsonSchema: structured }
        : {}),
    },
  };
}

interface GenerateContentResponse {
  candidates?: {
    content?: { parts?: { text?: string; thought?: boolean }[] };
    finishReason?: string;
  }[];
  promptFeedback?: { blockReason?: string };
  usageMetadata?: {
    promptTokenCount?: number;
    candidatesTokenCount?: number;
    thoughtsTokenCount?: number;
    totalTokenCount?: number;
  };
}

function usageOf(u: GenerateContentResponse["usageMetadata"]): TokenUsage | undefined {
  if (!u) return undefined;
  const prompt = u.promptTokenCount ?? 0;
  // Thinking is generated, and billed, as output.
  const result = (u.candidatesTokenCount ?? 0) + (u.thoughtsTokenCount ?? 0);
  return { prompt, result, total: u.totalTokenCount ?? prompt + result };
}

/** The answer's text: its first candidate's parts, thoughts left out. */
function textOf(answer: GenerateContentResponse): string {
  const parts = answer.candidates?.[0]?.content?.parts ?? [];
  let text = "";
  for (const part of parts) if (!part.thought && part.text) text += part.text;
  return text;
}

/** A prompt Gemini refused to answer (its safety filters): a failure that names why. */
function blocked(answer: GenerateContentResponse): BadAnswer | undefined {
  const reason = answer.promptFeedback?.blockReason;
  return reason ? new BadAnswer(`the provider blocked the prompt: ${cut(reason)}`) : undefined;
}

function completion(json: unknown): CompletionResult {
  const answer = json as GenerateContentResponse | null;
  if (!answer || typeof answer !== "object" || Array.isArray(answer) || errorOf(answer)) {
    throw notAnAnswer(json, "a generateContent response");
  }
  const refused = blocked(answer);
  if (refused) throw refused;
  if (!answer.candidates && !answer.usageMetadata)
    throw notAnAnswer(json, "a generateContent response");
  return { content: textOf(answer), usage: usageOf(answer.usageMetadata) };
}

function event(data: string, _type: string, state: StreamState): string {
  const answer = eventJson(data) as GenerateContentResponse;
  const error = errorOf(answer);
  if (error) throw new BadAnswer(`the provider reported an error: ${cut(error)}`);
  const refused = blocked(answer);
  if (refused) throw refused;
  // Each event carries the usage so far; the last one's is the answer's.
  if (answer.usageMetadata) state.usage = usageOf(answer.usageMetadata);
  return textOf(answer);
}
