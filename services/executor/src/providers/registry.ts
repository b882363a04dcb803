import { createHash } from "node:crypto";
import { LRUCache } from "lru-cache";
import type { EndpointPolicy } from "@pies/common";
import type { CatalogEvents } from "@pies/common/bus";
import type { Environment } from "@pies/proto/catalog";
import type { Dispatcher } from "undici";
import { guardedAgent } from "./guarded-fetch.js";
import { AnthropicClient } from "./anthropic.js";
import { AzureOpenAIClient } from "./azure-openai.js";
import { GoogleClient } from "./google.js";
import type { ProviderHttpOptions } from "./http-client.js";
import { OpenAIClient } from "./openai.js";
import { Router } from "./router.js";
import { TestClient } from "./test-provider.js";
import { ProviderError, type LlmClient } from "./types.js";

/** The client of each provider that speaks HTTP, by its name in an environment. */
const CLIENTS = new Map<
  string,
  new (environment: Environment, apiKey: string, options: ProviderHttpOptions) => LlmClient
>([
  ["openai", OpenAIClient],
  ["openai_compatible", OpenAIClient],
  ["azure_openai", AzureOpenAIClient],
  ["anthropic", AnthropicClient],
  ["google", GoogleClient],
]);

/**
 * Hands out one client per environment version and key, reused across calls, all over one
 * connection pool that checks every connection against the endpoint policy, so that connections
 * to a provider are kept alive rather than set up per request. A project's clients go when its
 * catalog changes (they hold the environment's provider key in clear: a replaced key does not
 * linger); the next call makes a new one over the same pool.
 */
export class ProviderRegistry {
  /** The least recently used client goes past 200 (clients hold no connection of their own). */
  private readonly clients = new LRUCache<string, { client: LlmClient; projectId: string }>({
    max: 200,
  });
  private readonly test = new TestClient();
  /** Routes the executions of virtual environments over this registry's clients. */
  readonly router: Router = new Router(this);
  private readonly agent: Dispatcher;
  private readonly options: ProviderHttpOptions;

  constructor(options: Omit<ProviderHttpOptions, "agent">, endpoints: EndpointPolicy) {
    this.agent = guardedAgent(endpoints);
    this.options = { ...options, agent: this.agent };
  }

  /** Drops a project's clients on its change events, and every client on a reset. */
  follow(events: CatalogEvents): () => void {
    return events.listen({
      change: ({ projectId }) => {
        const dropped: string[] = [];
        for (const [key, entry] of this.clients.entries()) {
          if (!projectId || entry.projectId === projectId) dropped.push(key);
        }
        for (const key of dropped) this.clients.delete(key);
      },
      reset: () => this.clients.clear(),
    });
  }

  /** Closes the provider connections kept alive. */
  close(): Promise<void> {
    return this.agent.close();
  }

  client(environment: Environment, apiKey: string): LlmClient {
    if (environment.provider === "test") return this.test;
    const Client = CLIENTS.get(environment.provider);
    if (!Client) throw new ProviderError(`provider ${environment.provider} is not supported`);
    // The environment as the catalog resolver keeps it (one object until its project changes):
    // its client's key found again without hashing it.
    const known = this.keys.get(environment);
    if (known !== undefined && known.apiKey === apiKey) {
      const kept = this.clients.get(known.key);
      if (kept) return kept.client;
    }
    const key = createHash("sha256")
      .update(
        `${environment.id}|${environment.updatedAt?.seconds}|${environment.updatedAt?.nanos}|${environment.endpointUrl}|${apiKey}`,
      )
      .digest("base64");
    this.keys.set(environment, { apiKey, key });
    const kept = this.clients.get(key);
    if (kept) return kept.client;
    const client = new Client(environment, apiKey, this.options);
    this.clients.set(key, { client, projectId: environment.projectId });
    return client;
  }

  /**
   * The key of each environment object's client, with the provider key it was made for, so that
   * the executions that share the resolver's answer (every one until its project changes) do not
   * hash it again (a SHA-256 per execution). Weak: it goes with the environment object, which
   * holds that provider key no longer than the resolver's answer holding both; a client dropped
   * by a change event is not found through it (the clients are looked up all the same).
   */
  private readonly keys = new WeakMap<Environment, { apiKey: string; key: string }>();
}
