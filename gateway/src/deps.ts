import type { Registry } from "prom-client";
import type { Client } from "@connectrpc/connect";
import type { Logger } from "@pies/common";
import type { CatalogEvents, RunEventBus } from "@pies/common/bus";
import type { CatalogService } from "@pies/proto/catalog";
import type { ExecutorService } from "@pies/proto/executor";
import type { ExperimentsService } from "@pies/proto/experiments";
import type { RunsService } from "@pies/proto/runs";
import type { InputLimits } from "./json/limits.js";

/** What the gateway translates to: the three services and the run event bus. */
export interface GatewayDeps {
  catalog: Client<typeof CatalogService>;
  runs: Client<typeof RunsService>;
  /** The experiments, which the runs service keeps and replays (DESIGN.md §13). */
  experiments: Client<typeof ExperimentsService>;
  executor: Client<typeof ExecutorService>;
  bus: RunEventBus;
  /** The catalog's change events: they drop the verified keys of a project whose keys changed. */
  catalogEvents: CatalogEvents;
  logger: Logger;
  /** Whether every dependency is reachable (GET /readyz). */
  isReady: () => Promise<boolean>;
  options: GatewayOptions;
  /** The key that signs and verifies the JWTs of token exchange (tokens.ts: tokenKeyFrom). */
  tokenKey: Uint8Array;
  /**
   * More metrics for GET /metrics, registered in its registry: an executor in the same process
   * (the edge, the embedded mode) adds its routing's.
   */
  metrics?: (registry: Registry) => void;
}

export interface GatewayOptions extends InputLimits {
  maxBodyBytes: number;
  /** Deepest nesting of a JSON body (PIES_MAX_JSON_DEPTH); deeper is a 400. */
  maxJsonDepth: number;
  /**
   * How long a verified API key is trusted without asking the catalog again when no change event
   * comes (events drop it at once: this bounds what a lost event costs).
   */
  authCacheSeconds: number;
  /** How long a key the catalog refused is refused without asking again (0: always ask). */
  authNegativeCacheSeconds: number;
  /** Seconds between SSE keep-alive comments (and checks that a run has not ended unseen). */
  sseHeartbeatSeconds: number;
  /** Open SSE streams one API key may hold on this gateway; more get 429. */
  maxStreamsPerKey: number;
  /** Time to receive a request's headers (slow clients are cut with 408). */
  headersTimeoutMs: number;
  /** Time to receive a whole request, headers and body; responses (SSE) are not bounded by it. */
  requestTimeoutMs: number;
  /** Trust X-Forwarded-For for the client address recorded on runs. */
  trustProxy: boolean;
  /** How long a token from `POST /token/issue` is valid. */
  tokenTtlSeconds: number;
  /** Requests per minute per API key (or token) and replica; 0: no limit. */
  rateLimitPerMinute: number;
  /** Origins allowed by CORS (`*`: any); none: CORS off. */
  corsOrigins: string[];
  /**
   * The web console's build (a directory with index.html and assets/) served at `/`; undefined:
   * `@pies/console`'s dist when it was built; false: no console.
   */
  consoleDir?: string | false;
  /** Where Kubernetes' probes are served by a thread of their own (probe-server.ts); none: off. */
  probe?: { host: string; port: number };
}
