import { setTimeout as sleep } from "node:timers/promises";
import { NoRespondersError, TimeoutError } from "@nats-io/transport-node";
import {
  JetStreamApiCodes,
  JetStreamApiError,
  type JetStreamManager,
  type StreamConfig,
  type StreamInfo,
} from "@nats-io/jetstream";
import { ConfigError } from "../config.js";
import type { Logger } from "../logger.js";

/** A stream's settings: its name, subjects and limits (see JetStream's StreamConfig). */
export type StreamSettings = Partial<StreamConfig> & Pick<StreamConfig, "name" | "subjects">;

/** Where a stream's settings come from: named when NATS refuses them, told what changed. */
export interface StreamOrigin {
  /** The settings that shape the stream, as the operator set them (`{ PIES_NATS_REPLICAS: 3 }`). */
  settings: Record<string, string | number>;
  /** Told what changed when an existing stream is updated. */
  logger?: Logger;
}

/**
 * NATS's answers that refuse a stream as configured rather than for the moment: more replicas
 * than the servers can place, or more bytes than they can reserve.
 */
const REFUSALS = new Set([
  10005, // no suitable peers for placement
  10023, // insufficient resources
  10047, // insufficient storage resources available
  10074, // replicas > 1 not supported in non-clustered mode
]);

/** JetStream system temporarily unavailable (a cluster without a meta leader). */
const UNAVAILABLE = 10008;

/**
 * How long a start keeps asking a cluster that does not answer yet. Requests about a stream of
 * several replicas that another process is creating at the same moment go unanswered on
 * nats-server 2.9.10 (seen: two of four processes starting together timed out).
 */
const SETTLE_MS = 30_000;

const transient = (err: unknown) =>
  err instanceof TimeoutError ||
  err instanceof NoRespondersError ||
  (err instanceof JetStreamApiError && err.code === UNAVAILABLE);

function refused(name: string, origin: StreamOrigin | undefined, why: string): ConfigError {
  const settings = Object.entries(origin?.settings ?? {})
    .map(([k, v]) => `${k}=${v}`)
    .join(", ");
  return new ConfigError(
    `NATS refused the stream ${name}${settings ? ` as configured (${settings})` : ""}: ${why}`,
  );
}

/** The settings of `wanted` that `current` has otherwise, with both values. */
function changes(current: StreamConfig, wanted: StreamSettings) {
  const changed: Record<string, { from: unknown; to: unknown }> = {};
  for (const [key, to] of Object.entries(wanted)) {
    const from = (current as unknown as Record<string, unknown>)[key];
    if (JSON.stringify(from) !== JSON.stringify(to)) changed[key] = { from, to };
  }
  return changed;
}

/**
 * Creates the stream, or updates it where its settings differ from these (limits, replicas), so
 * that any component may start first and a changed setting (a maximum age, PIES_NATS_REPLICAS)
 * takes effect on the next start; what changed is logged. A cluster that does not answer yet is
 * asked again for up to 30 s. A stream NATS cannot make as configured (more replicas than nodes,
 * more bytes than it can reserve) is a ConfigError naming the settings: the process does not start.
 */
export async function ensureStream(
  jsm: JetStreamManager,
  config: StreamSettings,
  origin?: StreamOrigin,
): Promise<void> {
  const deadline = Date.now() + SETTLE_MS;
  for (let attempt = 0; ; attempt++) {
    try {
      return await applyStream(jsm, config, origin);
    } catch (err) {
      if (!transient(err) || Date.now() >= deadline) throw err;
      await sleep(Math.min(2000, 250 * 2 ** attempt));
    }
  }
}

async function applyStream(jsm: JetStreamManager, config: StreamSettings, origin?: StreamOrigin) {
  const replicas = config.num_replicas ?? 1;
  let existing: StreamInfo | undefined;
  try {
    existing = await jsm.streams.info(config.name);
  } catch (err) {
    if (!(err instanceof JetStreamApiError) || err.code !== JetStreamApiCodes.StreamNotFound) {
      throw err;
    }
  }
  try {
    if (!existing) {
      await jsm.streams.add(config);
      return;
    }
    const changed = changes(existing.config, config);
    if (Object.keys(changed).length === 0) return;
    // nats-server 2.9 takes an update to more replicas on a server outside a cluster without a
    // word, and goes on keeping one copy.
    if (replicas > 1 && !existing.cluster) {
      throw refused(
        config.name,
        origin,
        `the NATS server is not part of a cluster, which ${replicas} replicas need (PIES_NATS_REPLICAS is 1 for a single server)`,
      );
    }
    await jsm.streams.update(config.name, config);
    origin?.logger?.info({ stream: config.name, changed }, "updated the stream's settings");
  } catch (err) {
    if (err instanceof JetStreamApiError && REFUSALS.has(err.code)) {
      const hint =
        replicas > 1 && err.code !== 10047
          ? " (PIES_NATS_REPLICAS is at most the number of nodes of the NATS cluster)"
          : "";
      throw refused(config.name, origin, `${err.message} (${err.code})${hint}`);
    }
    throw err;
  }
}
