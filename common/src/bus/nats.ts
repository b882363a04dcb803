import { connect, type NatsConnection, type Status } from "@nats-io/transport-node";

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
