import { performance } from "node:perf_hooks";
import { jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";

/**
 * What `npm run soak` and the steady-state test put into and read from a NATS server: an event
 * stream filled with earlier runs' events, and what the server holds for pies (messages and
 * consumers of its streams, subscriptions) — what a stream left off the live path leaves behind.
 */

/** One stream's messages and consumers (JetStream API: STREAM.INFO). */
export interface StreamCounts {
  messages: number;
  consumers: number;
}

/**
 * Each stream's counts by name (a stream that does not exist, or a server that does not answer
 * now, is left out).
 */
export async function streamCounts(
  jsm: JetStreamManager,
  streams: string[],
): Promise<Record<string, StreamCounts>> {
  const out: Record<string, StreamCounts> = {};
  await Promise.all(
    streams.map(async (name) => {
      try {
        const { state } = await jsm.streams.info(name);
        out[name] = { messages: state.messages, consumers: state.consumer_count };
      } catch {
        // gone or unreachable: no figure
      }
    }),
  );
  return out;
}

/**
 * The names of a stream's consumers, listed through the JetStream API (CONSUMER.LIST): the count
 * of streamCounts says how many, this which (ordered consumers are named by the server).
 */
export async function consumerNames(jsm: JetStreamManager, stream: string): Promise<string[]> {
  const names: string[] = [];
  for await (const info of jsm.consumers.list(stream)) names.push(info.name);
  return names;
}

/**
 * The server's subscriptions (`/subsz` of its monitoring port, `nats-server -m`): every client's
 * and the server's own (JetStream's API, each consumer's).
 */
export async function natsSubscriptions(monitorUrl: string): Promise<number> {
  const response = await fetch(`${monitorUrl}/subsz`, { signal: AbortSignal.timeout(5_000) });
  if (!response.ok) throw new Error(`${monitorUrl}/subsz answered ${response.status}`);
  return ((await response.json()) as { num_subscriptions: number }).num_subscriptions;
}

export interface FillOptions {
  url: string;
  /** pies' event stream (PIES_NATS_STREAM): its count says when every event is stored. */
  stream: string;
  /** pies' PIES_NATS_SUBJECT_PREFIX: the events go to `<prefix>.run.<run>.chunk|end`. */
  subjectPrefix: string;
  /** How many events: six per earlier run (five chunks, then the end). */
  events: number;
  /** Events sent between two flushes (default 5000). */
  batch?: number;
}

/**
 * Stores `events` events of earlier runs in pies' event stream (which must exist), as a
 * deployment's stream holds an hour of every run's where a test's starts empty: what a stream
 * costs NATS may grow with what the stream holds. The events go as core NATS publishes, which
 * JetStream stores without acknowledging each (an acknowledged publish a time makes a million take
 * minutes: ~12,000/s here, against ~100,000/s), flushed every `batch` so that the server keeps up;
 * then the stream's count must show every one stored. Resolves with how long it took.
 */
export async function fillEventStream(options: FillOptions): Promise<{ ms: number }> {
  const started = performance.now();
  const batch = options.batch ?? 5_000;
  const nc = await connect({ servers: options.url, name: "stream-fill" });
  try {
    const jsm = await jetstreamManager(nc);
    const count = async () => (await jsm.streams.info(options.stream)).state.messages;
    const target = (await count()) + options.events;
    // About an event's size: a chunk of an answer and its JSON.
    const data = new TextEncoder().encode(
      JSON.stringify({ delta: "a chunk of an earlier run's answer, about this long" }),
    );
    const prefix = `${options.subjectPrefix}.run.earlier${Date.now().toString(36)}`;
    for (let i = 0; i < options.events; i++) {
      nc.publish(`${prefix}-${Math.floor(i / 6)}.${i % 6 === 5 ? "end" : "chunk"}`, data);
      if (i % batch === batch - 1) await nc.flush();
    }
    await nc.flush();
    // Stored once the stream counts them all (pies' own publishes only add to the count).
    const deadline = Date.now() + 60_000;
    let stored = await count();
    while (stored < target) {
      if (Date.now() > deadline) {
        throw new Error(
          `the stream holds ${stored} messages, ${target - stored} short of the fill`,
        );
      }
      await new Promise((resolve) => setTimeout(resolve, 200));
      stored = await count();
    }
  } finally {
    await nc.close();
  }
  return { ms: performance.now() - started };
}
