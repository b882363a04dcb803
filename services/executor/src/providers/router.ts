import { LRUCache } from "lru-cache";
import { routingOf, type RouteEntry, type Routing } from "@pies/common";
import type { Environment, RoutedEnvironment } from "@pies/proto/catalog";
import { configOf } from "../catalog-payloads.js";
import {
  ProviderError,
  type CompletionOptions,
  type CompletionRequest,
  type CompletionResult,
  type LlmClient,
} from "./types.js";

/** One call a virtual environment made to one of its entries. */
export interface RouteTry {
  environmentId: string;
  model: string;
  durationMs: number;
  /** Unset for the call that answered. */
  error?: ProviderError;
}

/** What the router needs of the provider registry. */
export interface ClientSource {
  client(environment: Environment, apiKey: string): LlmClient;
}

export interface BreakerOptions {
  /** Consecutive failures that open an entry's circuit. */
  failures: number;
  /** How long an open circuit skips its entry before one call probes it. */
  coolDownMs: number;
}

export const DEFAULT_BREAKER: BreakerOptions = { failures: 5, coolDownMs: 30_000 };

/** An entry's circuit: closed (called), open (skipped until its cool-down ends), or probing. */
export type BreakerState = "closed" | "open" | "half_open";

/**
 * One entry's circuit breaker, in this executor: it opens after `failures` failures in a row
 * that another provider could have answered, skips the entry for `coolDownMs`, then lets one
 * call through (half open): its success closes the circuit, its failure opens it again.
 */
class Breaker {
  private failures = 0;
  private openedAt: number | undefined;
  private probing = false;

  constructor(private readonly options: BreakerOptions) {}

  state(now: number): BreakerState {
    if (this.openedAt === undefined) return "closed";
    return this.probing || now - this.openedAt >= this.options.coolDownMs ? "half_open" : "open";
  }

  /** Whether admit would let a call through now, without claiming a half-open circuit's probe. */
  open(now: number): boolean {
    const state = this.state(now);
    return state === "open" || (state === "half_open" && this.probing);
  }

  /** Whether a call may go to the entry now (a half-open circuit lets one through at a time). */
  admit(now: number): boolean {
    const state = this.state(now);
    if (state === "closed") return true;
    if (state === "open" || this.probing) return false;
    this.probing = true;
    return true;
  }

  succeeded(): void {
    this.failures = 0;
    this.openedAt = undefined;
    this.probing = false;
  }

  failed(now: number): void {
    this.failures++;
    if (this.probing || this.failures >= this.options.failures) this.openedAt = now;
    this.probing = false;
  }

  /** A call admitted that ended for another reason (the caller left): the probe is free again. */
  released(): void {
    this.probing = false;
  }
}

/**
 * Routes the executions of virtual environments (`virtual_lb`, DESIGN.md §7): each picks its
 * entries in a weighted random order; with `failover`, a failure before the first chunk that
 * another provider could answer (429, 5xx, a timeout, a refused or reset connection) moves on to
 * the next entry, each at most once. An entry that keeps failing is skipped for a while (its
 * circuit breaker). Every call is kept (RouteTry) for the run's attempts.
 */
export class Router {
  /**
   * By `<virtual environment>|<environment>|<model>`; the least recently used go past 10,000 (an
   * entry of a deleted environment is never asked for again).
   */
  private readonly breakers = new LRUCache<string, Breaker>({ max: 10_000 });
  /** Told of each call that moves on to a next entry (metrics.ts counts them). */
  onFailover: ((virtualEnvironmentId: string) => void) | undefined;
  private readonly routings = new WeakMap<Environment, Routing | { invalid: string }>();

  constructor(
    private readonly clients: ClientSource,
    private readonly options: BreakerOptions = DEFAULT_BREAKER,
    private readonly random: () => number = Math.random,
    private readonly now: () => number = Date.now,
  ) {}

  /**
   * The client of one execution of `environment`, over the environments its entries name
   * (`routes`, the catalog's answer); each call it makes goes into `tries`.
   */
  client(environment: Environment, routes: RoutedEnvironment[], tries: RouteTry[]): LlmClient {
    return {
      complete: (request, options) => this.complete(environment, routes, tries, request, options),
    };
  }

  /** Each entry's circuit, by `<virtual environment>|<environment>|<model>` (for metrics and tests). */
  states(): Map<string, BreakerState> {
    const now = this.now();
    return new Map([...this.breakers.entries()].map(([key, breaker]) => [key, breaker.state(now)]));
  }

  /** Entry indexes in a weighted random order, without repeats (weights need not sum to 1). */
  order(routing: Routing): number[] {
    const left = routing.entries.map((e, i) => ({ i, weight: e.weight }));
    const order: number[] = [];
    while (left.length > 0) {
      let total = 0;
      for (const e of left) total += e.weight;
      let pick = this.random() * total;
      let at = left.length - 1;
      for (const [k, e] of left.entries()) {
        pick -= e.weight;
        if (pick < 0) {
          at = k;
          break;
        }
      }
      const [picked] = left.splice(at, 1);
      if (picked) order.push(picked.i);
    }
    return order;
  }

  private routingOf(environment: Environment): Routing {
    let routing = this.routings.get(environment);
    if (!routing) {
      routing = routingOf(configOf(environment));
      this.routings.set(environment, routing);
    }
    if ("invalid" in routing) {
      throw new ProviderError(`virtual environment ${environment.id}: ${routing.invalid}`);
    }
    return routing;
  }

  private breaker(key: string): Breaker {
    let breaker = this.breakers.get(key);
    if (!breaker) {
      breaker = new Breaker(this.options);
      this.breakers.set(key, breaker);
    }
    return breaker;
  }

  private async complete(
    environment: Environment,
    routes: RoutedEnvironment[],
    tries: RouteTry[],
    request: CompletionRequest,
    options: CompletionOptions,
  ): Promise<CompletionResult> {
    const routing = this.routingOf(environment);
    // The entries in their weighted order, those whose circuit is open left out: without failover
    // the first of the others is the one called, with it each in turn.
    const now = this.now();
    const order = this.order(routing).map((index) => {
      const entry = routing.entries[index] as RouteEntry;
      const route = routes.find((r) => r.environment?.id === entry.environmentId);
      const model = entry.model || route?.environment?.defaultModel || "";
      const breaker = this.breaker(`${environment.id}|${entry.environmentId}|${model}`);
      return { entry, route, model, breaker };
    });
    const admissible = order.filter((c) => !c.breaker.open(now));
    const candidates = routing.failover ? admissible : admissible.slice(0, 1);
    if (candidates.length === 0) throw coolingDown(environment, order.length);
    let chunked = false;
    const given = options.onChunk;
    const onChunk =
      given &&
      ((text: string) => {
        chunked = true;
        given(text);
      });
    let last: ProviderError | undefined;
    for (const [n, { entry, route, model, breaker }] of candidates.entries()) {
      const started = this.now();
      // Another execution may have taken a half-open circuit's one probe meanwhile.
      if (!breaker.admit(started)) continue;
      const tried: RouteTry = { environmentId: entry.environmentId, model, durationMs: 0 };
      tries.push(tried);
      // An entry with a next one to fail over to is tried once: the next one is its retry.
      const hasNext = n < candidates.length - 1;
      try {
        const called = route?.environment;
        if (!called) {
          throw failover(
            new ProviderError(`environment ${entry.environmentId} of the route no longer exists`),
          );
        }
        // The catalog checked the entry when the virtual environment was written; the environment
        // it names may have changed since.
        if (!model || (called.enabledModels.length > 0 && !called.enabledModels.includes(model))) {
          throw failover(
            new ProviderError(
              model
                ? `model ${model} is no longer enabled in environment ${called.id} of the route`
                : `environment ${called.id} of the route has no default model any more`,
            ),
          );
        }
        const client = this.clients.client(called, route.apiKey);
        const result = await client.complete(
          { ...request, model },
          { ...options, onChunk, ...(hasNext ? { maxRetries: 0 } : {}) },
        );
        tried.durationMs = this.now() - started;
        breaker.succeeded();
        return result;
      } catch (err) {
        tried.durationMs = this.now() - started;
        const error =
          err instanceof ProviderError
            ? err
            : new ProviderError("the provider call failed unexpectedly", "provider_error", err);
        tried.error = error;
        last = error;
        if (error.code === "cancelled" || options.signal?.aborted) {
          breaker.released();
          throw error;
        }
        if (error.failover) breaker.failed(this.now());
        else breaker.released();
        // Never after a chunk: the caller has part of an answer.
        if (!routing.failover || !error.failover || chunked) throw error;
        if (hasNext) this.onFailover?.(environment.id);
      }
    }
    // None called: another execution took each half-open circuit's probe meanwhile.
    throw last ?? coolingDown(environment, candidates.length);
  }
}

/** No entry of `environment` may be called now: their circuits are open. */
const coolingDown = (environment: Environment, skipped: number) =>
  failover(
    new ProviderError(
      `every entry of virtual environment ${environment.id} is cooling down after failures (${skipped} skipped)`,
    ),
  );

/** `error`, marked as one another provider could answer. */
function failover(error: ProviderError): ProviderError {
  error.failover = true;
  return error;
}
