import { hash } from "node:crypto";
import type { JsonObject, JsonValue, Logger } from "@pies/common";
import type { ResultCacheStore } from "@pies/common/bus";
import type { CachePolicy, Interaction } from "@pies/proto/catalog";
import type { CompletionRequest, TokenUsage } from "./providers/types.js";

/** A cached answer: the result, the text it was streamed as, and the run it came from. */
export interface CachedResult {
  runId: string;
  result: JsonValue;
  usage?: TokenUsage;
  /** Milliseconds since the epoch after which the entry is not used. */
  expiresAt: number;
}

/** What a cache policy asks of one execution. */
export type CacheMode =
  /** Answer from the cache when it holds the key; otherwise execute and keep the answer. */
  | "read"
  /** Execute, and keep the answer in place of the cached one (a cache_and_refresh refresh). */
  | "refresh";

/** The share of cache_and_refresh executions that refresh, when the policy does not say. */
export const DEFAULT_REFRESH_PROBABILITY = 0.1;

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/**
 * The result cache of DESIGN.md §4.5 over a shared store (NATS JetStream when deployed, the process
 * in the embedded mode). Failures of the store are logged and read as misses: the cache may make an
 * execution cheaper, never fail it.
 */
export class ResultCache {
  constructor(
    private readonly store: ResultCacheStore,
    private readonly logger: Logger,
    /** The ttl of a policy that gives none: the store's maximum age. */
    private readonly defaultTtlSeconds = 86_400,
  ) {}

  /** What `policy` asks for now (a cache_and_refresh draws), or undefined when nothing. */
  static mode(policy: CachePolicy | undefined): CacheMode | undefined {
    if (!policy) return undefined;
    if (policy.type === "cache") return "read";
    if (policy.type !== "cache_and_refresh") return undefined;
    const p = policy.refreshProbability ?? DEFAULT_REFRESH_PROBABILITY;
    return Math.random() < p ? "refresh" : "read";
  }

  /**
   * The key of an execution: a hash of its project, the environment (two backends may serve one
   * model name), the interaction's version (id, version number and last change, so that an edited
   * draft misses), the rendered prompt, the model and its
   * options, the output schema and the values of the policy's `varies_on` paths in the data.
   */
  static key(
    projectId: string,
    environmentId: string,
    interaction: Interaction,
    request: CompletionRequest,
    policy: CachePolicy,
    data: JsonObject,
  ): string {
    const varies = policy.variesOn.map((path) => valueAt(data, path) ?? null);
    const updated = interaction.updatedAt;
    const text = JSON.stringify([
      projectId,
      environmentId,
      interaction.id,
      interaction.version,
      updated ? `${updated.seconds}.${updated.nanos}` : "",
      request.messages,
      request.model,
      request.temperature ?? null,
      request.maxTokens ?? null,
      request.schema ?? null,
      varies,
    ]);
    return hash("sha256", text, "base64url");
  }

  /** The cached result of `key`, unless there is none, it expired, or the store failed. */
  async get(key: string): Promise<CachedResult | undefined> {
    try {
      const data = await this.store.get(key);
      if (!data) return undefined;
      const entry = JSON.parse(decoder.decode(data)) as CachedResult;
      return entry.expiresAt > Date.now() ? entry : undefined;
    } catch (err) {
      this.logger.warn({ err }, "the result cache could not be read; executing");
      return undefined;
    }
  }

  /** Keeps a result for the policy's ttl, without holding the caller up. */
  put(key: string, policy: CachePolicy, entry: Omit<CachedResult, "expiresAt">): void {
    const ttl = policy.ttl ?? this.defaultTtlSeconds;
    if (ttl <= 0) return;
    const data = encoder.encode(JSON.stringify({ ...entry, expiresAt: Date.now() + ttl * 1000 }));
    this.store.put(key, data).catch((err: unknown) => {
      this.logger.warn({ err }, "a result could not be kept in the result cache");
    });
  }
}

/** The value at a dotted path of the data (`customer.id`), if any. */
function valueAt(data: JsonObject, path: string): JsonValue | undefined {
  let value: JsonValue | undefined = data;
  for (const part of path.split(".")) {
    if (value === null || typeof value !== "object" || Array.isArray(value)) return undefined;
    value = (value as JsonObject)[part];
  }
  return value;
}
