import { connect, type NatsConnection, type Status } from "@nats-io/transport-node";
import {
  JetStreamApiCodes,
  JetStreamApiError,
  type JetStreamManager,
  type StreamConfig,
  type StreamInfo,
} from "@nats-io/jetstream";
import { ConfigError } from "../config.js";
import type { Logger } from "../logger.js";

/**
 * The servers of a NATS_URL: one URL, or a comma-separated list (the nodes of a cluster), of which
 * the client tries each in turn; a cluster tells it of its other nodes once connected.
 */
export function natsServers(url: string): string[] {
  return url
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
}

/**
 * The process's one NATS connection, reconnecting forever (to any node of `url`'s list). The
 * run-event bus, the run records and the catalog's change events all ride on it.
 */
export function connectNats(url: string, name: string): Promise<NatsConnection> {
  return connect({
    servers: natsServers(url),
    name,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 500,
    // Without it every request (each JetStream publish) builds an Error to keep its caller's
    // stack for a timeout message: a stack capture per record put, on the hot path.
    noAsyncTraces: true,
  });
}

/**
 * Whether the server answers a ping within `timeoutMs`. While disconnected a flush waits for the
 * reconnection, so without the limit a readiness probe would hang instead of answering false.
 */
export async function natsReady(nc: NatsConnection, timeoutMs = 2000): Promise<boolean> {
  if (nc.isClosed()) return false;
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      nc.flush().then(() => true),
      new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), timeoutMs))),
    ]);
  } catch {
    return false;
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Calls `onReconnect` each time the connection is re-established after an outage (messages sent
 * meanwhile on core NATS subjects were lost). Returns a function that stops watching.
 */
export function onReconnect(nc: NatsConnection, onReconnect: () => void): () => void {
  // The iterator has a stop() that its published type does not show.
  const status = nc.status() as AsyncIterable<Status> & { stop?: () => void };
  void (async () => {
    for await (const s of status) if (s.type === "reconnect") onReconnect();
  })().catch(() => {});
  return () => status.stop?.();
}

/**
 * What a message carries besides its data, within the server's max_payload: the headers
 * (`NATS/1.0`, Nats-Msg-Id, Nats-Expected-Last-Subject-Sequence or Pies-Seq, traceparent and
 * tracestate), well under this.
 */
const HEADERS_ALLOWANCE = 1024;

/**
 * The largest data a message takes: the connected server's max_payload (1 MiB by default; read
 * at each call, as a reconnection may reach a server with another) less the headers.
 */
export function maxDataBytes(nc: NatsConnection): number | undefined {
  const maxPayload = nc.info?.max_payload;
  return maxPayload ? maxPayload - HEADERS_ALLOWANCE : undefined;
}

/** A stream's settings: its name, subjects and limits (see JetStream's StreamConfig). */
export type StreamSettings = Partial<StreamConfig> & Pick<StreamConfig, "name" | "subjects">;

/** Where a stream's settings come from: named when NATS refuses them, and told what changed. */
export interface StreamOrigin {
  /** The settings that shape the stream, as the operator set them (`{ PIES_NATS_REPLICAS: 3 }`). */
  settings: Record<string, string | number>;
  /** Told when an existing stream's replicas change. */
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

function refused(name: string, origin: StreamOrigin | undefined, why: string): ConfigError {
  const settings = Object.entries(origin?.settings ?? {})
    .map(([k, v]) => `${k}=${v}`)
    .join(", ");
  return new ConfigError(
    `NATS refused the stream ${name}${settings ? ` as configured (${settings})` : ""}: ${why}`,
  );
}

/**
 * Creates the stream, or updates its limits and replicas to these, so that any component may
 * start first and a changed setting (a maximum age, PIES_NATS_REPLICAS) takes effect on the next
 * start. A stream NATS cannot make as configured (more replicas than nodes, more bytes than it
 * can reserve) is a ConfigError naming the settings: the process does not start.
 */
export async function ensureStream(
  jsm: JetStreamManager,
  config: StreamSettings,
  origin?: StreamOrigin,
): Promise<void> {
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
    const before = existing.config.num_replicas;
    if (before !== replicas) {
      origin?.logger?.info(
        { stream: config.name, from: before, to: replicas },
        "changed the stream's replicas to PIES_NATS_REPLICAS",
      );
    }
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
