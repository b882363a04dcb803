import { PGlite } from "@electric-sql/pglite";
import { createLogger } from "@pies/common";
import {
  MemoryRunEventBus,
  MemoryRunRecords,
  type RunEventBus,
  type RunRecords,
} from "@pies/common/bus";
import { createDatabase } from "@pies/common/db";
import { seedAccount } from "@pies/catalog";
import { gatewayOptions, loadGatewaySettings } from "../src/config.js";
import type { GatewayOptions } from "../src/deps.js";
import type { Kysely } from "kysely";
import type { ExecutorSettings } from "@pies/executor";
import { createInMemoryPies, type InMemoryPies } from "@pies/embedded";

export interface TestPies extends InMemoryPies {
  /** The admin key and `test` environment of a first project. */
  key: string;
  projectId: string;
  environmentId: string;
  /** The database both schemas live in, for tests that look below the services. */
  db: Kysely<any>;
  close(): Promise<void>;
}

/** The signing key of token exchange in these tests (tests that forge tokens use another). */
export const testTokenKey = new Uint8Array(32).fill(3);

/**
 * The real gateway over the real services, in memory (PGlite, an in-process bus, no ports), with
 * an account whose project has an API key and a `test` environment.
 */
export async function startTestPies(
  options: {
    bus?: RunEventBus;
    /** The record log (a test that reads the records gives its own). */
    records?: RunRecords;
    gateway?: Partial<GatewayOptions>;
    executor?: Partial<ExecutorSettings>;
    keyName?: string;
  } = {},
): Promise<TestPies> {
  const db = createDatabase({ pglite: await PGlite.create() });
  const pies = await createInMemoryPies({
    db,
    bus: options.bus ?? new MemoryRunEventBus(),
    records: options.records ?? new MemoryRunRecords(),
    secretKey: Buffer.alloc(32, 1).toString("base64"),
    tokenKey: testTokenKey,
    logger: createLogger("test", "silent"),
    executor: {
      PIES_RUN_TTL_SECONDS: 300,
      PIES_PROVIDER_TIMEOUT_MS: 5000,
      PIES_PROVIDER_MAX_RETRIES: 0,
      // Wide: a template limit a busy CI machine can meet fails tests of other things; the
      // tests of the limit set their own.
      PIES_TEMPLATE_TIMEOUT_MS: 5000,
      PIES_TEMPLATE_MEMORY_BYTES: 16 * 1024 * 1024,
      PIES_TEMPLATE_WORKERS: 1,
      PIES_MAX_PROMPT_BYTES: 1024 * 1024,
      PIES_RUN_HEARTBEAT_SECONDS: 10,
      // As deployed: no loopback, private or metadata endpoints.
      PIES_ALLOWED_ENDPOINTS: "",
      PIES_PROJECT_MAX_EXECUTIONS: 256,
      PIES_PROJECT_MAX_RENDERS: 64,
      PIES_CATALOG_CACHE_SECONDS: 60,
      PIES_RESULT_CACHE_MAX_BYTES: 16 * 1024 * 1024,
      PIES_RESULT_CACHE_MAX_AGE_SECONDS: 3600,
      PIES_STREAM_MAX_AGE_SECONDS: 3600,
      PIES_RECORD_START_AFTER_MS: 250,
      ...options.executor,
    },
    sweep: { leaseSeconds: 60, intervalMs: 10_000 },
    // Every message that crosses a hop is frozen: a service or the gateway that changed a message
    // it shares with the other side (the hops call handlers directly, no copy) fails the test.
    checkIsolation: true,
    gateway: {
      // The configured defaults (limits included), then what the tests need.
      ...gatewayOptions(loadGatewaySettings({})),
      maxBodyBytes: 64 * 1024,
      authCacheSeconds: 0,
      authNegativeCacheSeconds: 0,
      sseHeartbeatSeconds: 15,
      maxStreamsPerKey: 100,
      headersTimeoutMs: 10_000,
      requestTimeoutMs: 30_000,
      trustProxy: false,
      rateLimitPerMinute: 0,
      ...options.gateway,
    },
  });
  const seeded = await seedAccount(pies.catalog, { account: "acme", key: options.keyName ?? "ci" });
  return {
    ...pies,
    key: seeded.key,
    projectId: seeded.projectId,
    environmentId: seeded.environmentId,
    db,
    async close() {
      await pies.stop(5000);
      await pies.app.close();
      await db.destroy();
    },
  };
}
