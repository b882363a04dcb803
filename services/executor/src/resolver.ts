import type { Client } from "@connectrpc/connect";
import { CatalogCache, type CatalogEvents } from "@pies/common/bus";
import { deepFreeze } from "@pies/common/server";
import type { CatalogService, ResolveExecutionResponse } from "@pies/proto/catalog";

/** What an execution asks the catalog (ResolveExecutionRequest's fields). */
export interface ResolveRequest {
  projectId: string;
  interaction?:
    | { case: "interactionId" | "interactionName"; value: string }
    | { case: undefined; value?: undefined };
  /** Overrides the interaction's environment (required with environmentOnly). */
  environmentId: string;
  environmentOnly?: boolean;
}

/** Answers kept at most (the least recently used go); each is an interaction and an environment. */
const MAX_ENTRIES = 10_000;

/**
 * `catalog.ResolveExecution` with what it answered kept (DESIGN.md §4, the hot path): the
 * interaction or version with its templates, the environment and its decrypted provider key, by
 * what the request resolves (project, interaction id or name with its selector, environment
 * override, environment only). A project's answers go on any change event of that project, all of
 * them when events may have been lost, and each after `maxAgeSeconds` at most.
 *
 * Answers are shared between executions: nothing may change them. They hold a provider key in
 * clear, so neither an answer nor this object is ever logged.
 */
export class CatalogResolver {
  private readonly cache: CatalogCache<ResolveExecutionResponse>;

  constructor(
    private readonly catalog: Client<typeof CatalogService>,
    options: { maxAgeSeconds: number; max?: number },
  ) {
    this.cache = new CatalogCache({
      maxAgeMs: options.maxAgeSeconds * 1000,
      max: options.max ?? MAX_ENTRIES,
    });
  }

  /** Drops answers on the catalog's change events; returns the function that stops it. */
  follow(events: CatalogEvents): () => void {
    return this.cache.follow(events);
  }

  /** The catalog's answer, from the cache or from one call shared by concurrent misses. */
  resolve(req: ResolveRequest): Promise<ResolveExecutionResponse> {
    const key = JSON.stringify([
      req.projectId,
      req.interaction?.case ?? "",
      req.interaction?.value ?? "",
      req.environmentId,
      req.environmentOnly ?? false,
    ]);
    return this.cache.get(
      key,
      () =>
        this.catalog
          .resolveExecution({
            projectId: req.projectId,
            interaction: req.interaction?.case ? req.interaction : { case: undefined },
            environmentId: req.environmentId,
            environmentOnly: req.environmentOnly ?? false,
          })
          // Every execution until the next change event reads this one answer, and its parts
          // (the result schema, the cache policy) go into runs that reach callers as they are
          // (in-process, with no copy between): frozen, so that no holder can change it for all.
          .then((answer) => deepFreeze(answer)),
      req.projectId,
    );
  }

  /** Answers kept now (for tests). */
  get size(): number {
    return this.cache.size;
  }
}
