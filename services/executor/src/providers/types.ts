import type { JsonObject } from "@pies/common";
import type { ChatMessage } from "../templates/render.js";

export interface CompletionRequest {
  model: string;
  messages: ChatMessage[];
  temperature?: number;
  maxTokens?: number;
  /** Output schema; the provider is asked for JSON that validates against it. */
  schema?: JsonObject;
}

export interface TokenUsage {
  prompt: number;
  result: number;
  total: number;
}

export interface CompletionResult {
  content: string;
  usage?: TokenUsage;
}

export interface CompletionOptions {
  signal?: AbortSignal;
  /** Streams: called with each piece of the content as it arrives. */
  onChunk?: (text: string) => void;
}

/** A failed provider call, with the run error code it records. */
export class ProviderError extends Error {
  constructor(
    message: string,
    readonly code: "provider_error" | "timeout" = "provider_error",
    /** What really happened (addresses, errno): for the logs, never for the caller. */
    cause?: unknown,
  ) {
    super(message, cause === undefined ? undefined : { cause });
  }
}

/** What the executor needs of a model provider: one completion, blocking or streamed. */
export interface LlmClient {
  complete(request: CompletionRequest, options: CompletionOptions): Promise<CompletionResult>;
}
