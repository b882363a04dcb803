import { setTimeout as delay } from "node:timers/promises";
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
  /**
   * Retries of this call, in place of the client's own (a virtual environment's entry with a next
   * entry to fail over to is tried once: the next entry is its retry).
   */
  maxRetries?: number;
}

/** A failed provider call, with the run error code it records. */
export class ProviderError extends Error {
  constructor(
    message: string,
    readonly code: ProviderErrorCode = "provider_error",
    /** What really happened (addresses, errno): for the logs, never for the caller. */
    cause?: unknown,
    /**
     * Set when the call may be retried after this many milliseconds (a 429 or 5xx with its
     * Retry-After) by a client that does not retry itself. The OpenAI client retries on its own.
     */
    readonly retryAfterMs?: number,
  ) {
    super(message, cause === undefined ? undefined : { cause });
  }

  /**
   * Another provider could answer the call (a 429, a 5xx, a timeout, a refused or reset
   * connection): what a virtual environment fails over on. Never for what the request itself
   * causes (a 400, a bad key) or for an answer that broke off.
   */
  failover = false;
}

/** The caller went away: its provider call ends so. */
export const providerAborted = (cause?: unknown) =>
  new ProviderError("the provider request was aborted", "cancelled", cause);

/** A pause that the caller's signal cuts short (node's timer removes its listener either way). */
export function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return delay(ms, undefined, signal && { signal }).then(
    () => {},
    () => {
      throw providerAborted(signal?.reason);
    },
  );
}

/**
 * The run error codes of a provider failure: `stream_error` when the answer broke off after its
 * first chunk (never retried), `cancelled` when the caller went away.
 */
export type ProviderErrorCode = "provider_error" | "timeout" | "stream_error" | "cancelled";

/** What the executor needs of a model provider: one completion, blocking or streamed. */
export interface LlmClient {
  complete(request: CompletionRequest, options: CompletionOptions): Promise<CompletionResult>;
}
