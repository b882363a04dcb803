import OpenAI from "openai";
import { EndpointRefusedError } from "@pies/common";
import type { Environment } from "@pies/proto/catalog";
import type { ChatMessage } from "../templates/render.js";
import {
  ProviderError,
  type CompletionOptions,
  type CompletionRequest,
  type CompletionResult,
  type LlmClient,
} from "./types.js";

export interface OpenAIProviderOptions {
  timeoutMs: number;
  /** Retries of 429, 5xx, timeouts and dropped connections, before any chunk was received. */
  maxRetries: number;
  /** The HTTP client, shared by all clients: every connection passes the endpoint policy. */
  fetch: typeof globalThis.fetch;
}

/**
 * OpenAI and every OpenAI-compatible endpoint, through the official SDK. The SDK's own retry
 * (exponential backoff honouring Retry-After) applies to the request only, that is before the first
 * chunk; a stream that breaks after it fails the run.
 */
export class OpenAIClient implements LlmClient {
  private readonly client: OpenAI;

  constructor(
    private readonly environment: Environment,
    apiKey: string,
    options: OpenAIProviderOptions,
  ) {
    this.client = new OpenAI({
      // The SDK insists on a key; local OpenAI-compatible servers often take none.
      apiKey: apiKey || "none",
      baseURL: environment.endpointUrl || undefined,
      timeout: options.timeoutMs,
      maxRetries: options.maxRetries,
      fetch: options.fetch,
    });
  }

  async complete(
    request: CompletionRequest,
    options: CompletionOptions,
  ): Promise<CompletionResult> {
    const params = this.params(request);
    try {
      if (!options.onChunk) {
        const completion = await this.client.chat.completions.create(
          { ...params, stream: false },
          { signal: options.signal },
        );
        return {
          content: completion.choices[0]?.message?.content ?? "",
          usage: usageOf(completion.usage),
        };
      }
      const stream = await this.client.chat.completions.create(
        { ...params, stream: true, stream_options: { include_usage: true } },
        { signal: options.signal },
      );
      let content = "";
      let usage: CompletionResult["usage"];
      try {
        for await (const chunk of stream) {
          const delta = chunk.choices[0]?.delta?.content;
          if (delta) {
            content += delta;
            options.onChunk(delta);
          }
          if (chunk.usage) usage = usageOf(chunk.usage);
        }
      } catch (err) {
        // Past the first chunk nothing is retried: the caller has part of an answer.
        if (!content) throw err;
        const failure = toProviderError(err);
        if (failure.code === "cancelled") throw failure;
        throw new ProviderError(
          `the provider's answer broke off after ${content.length} characters: ${failure.message}`,
          "stream_error",
          err,
        );
      }
      return { content, usage };
    } catch (err) {
      throw toProviderError(err);
    }
  }

  private params(request: CompletionRequest) {
    // The schema itself when it is sent as the response format.
    const structured =
      this.environment.config?.structured_output !== false ? request.schema : undefined;
    const messages: ChatMessage[] =
      request.schema && !structured
        ? [
            ...request.messages,
            {
              role: "system",
              content:
                "Answer with JSON only, that validates against this JSON Schema:\n" +
                JSON.stringify(request.schema),
            },
          ]
        : request.messages;
    return {
      model: request.model,
      messages,
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
    };
  }
}

function usageOf(usage: OpenAI.CompletionUsage | null | undefined) {
  if (!usage) return undefined;
  return {
    prompt: usage.prompt_tokens,
    result: usage.completion_tokens,
    total: usage.total_tokens,
  };
}

/**
 * A provider failure as the caller sees it. The provider's own answer (status and message) is
 * passed on; a failure below HTTP is generic, whatever its cause (refused, reset, unknown name,
 * TLS): addresses, DNS names and errno codes stay in the cause, for the logs, so that errors
 * cannot be used to map a network. Only the endpoint policy's refusal is named.
 */
function toProviderError(err: unknown): ProviderError {
  if (err instanceof ProviderError) return err;
  if (err instanceof OpenAI.APIConnectionTimeoutError) {
    return new ProviderError("the provider did not answer in time", "timeout", err);
  }
  if (err instanceof OpenAI.APIUserAbortError) {
    return new ProviderError("the provider request was aborted", "cancelled", err);
  }
  const refused = refusalIn(err);
  if (refused) {
    return new ProviderError(
      "the provider endpoint is not allowed by the endpoint policy",
      "provider_error",
      err,
    );
  }
  if (err instanceof OpenAI.APIError && err.status) {
    const reason = err.message || "provider request failed";
    return new ProviderError(`provider answered ${err.status}: ${reason}`, "provider_error", err);
  }
  return new ProviderError("the provider could not be reached", "provider_error", err);
}

/** The endpoint policy's refusal somewhere in an error's causes. */
function refusalIn(err: unknown): EndpointRefusedError | undefined {
  for (let e = err, depth = 0; e && depth < 8; e = (e as { cause?: unknown }).cause, depth++) {
    if (e instanceof EndpointRefusedError) return e;
  }
  return undefined;
}
