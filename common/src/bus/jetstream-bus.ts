import { headers as natsHeaders, nanos, type NatsConnection } from "@nats-io/transport-node";
import { currentTraceparent, tracingEnabled } from "../tracing.js";
import {
  DeliverPolicy,
  jetstream,
  jetstreamManager,
  StorageType,
  type JetStreamClient,
  type JetStreamManager,
} from "@nats-io/jetstream";
import type { RunEvent, RunEventBus, SubscribeOptions } from "./bus.js";
import { connectNats, ensureStream, natsReady, onReconnect } from "./nats.js";

export interface NatsSettings {
  NATS_URL: string;
  PIES_NATS_STREAM: string;
  PIES_NATS_SUBJECT_PREFIX: string;
  PIES_STREAM_MAX_AGE_SECONDS: number;
}

export interface JetStreamBusOptions {
  url: string;
  stream: string;
  subjectPrefix: string;
  maxAgeSeconds: number;
  /** Connection name shown by the NATS server (monitoring). */
  name: string;
}

/**
 * The run event bus on NATS JetStream. One connection per process, reconnecting forever; the
 * stream is created (or its limits updated) at connect, so any component may start first.
 */
export class JetStreamRunEventBus implements RunEventBus {
  private constructor(
    private readonly nc: NatsConnection,
    private readonly js: JetStreamClient,
    private readonly jsm: JetStreamManager,
    private readonly options: JetStreamBusOptions,
  ) {}

  /** Connects with the NATS_URL / PIES_NATS_* settings of a component's configuration. */
  static fromConfig(config: NatsSettings, name: string): Promise<JetStreamRunEventBus> {
    return JetStreamRunEventBus.connect({
      url: config.NATS_URL,
      stream: config.PIES_NATS_STREAM,
      subjectPrefix: config.PIES_NATS_SUBJECT_PREFIX,
      maxAgeSeconds: config.PIES_STREAM_MAX_AGE_SECONDS,
      name,
    });
  }

  static async connect(options: JetStreamBusOptions): Promise<JetStreamRunEventBus> {
    const nc = await connectNats(options.url, options.name);
    try {
      const bus = new JetStreamRunEventBus(nc, jetstream(nc), await jetstreamManager(nc), options);
      await bus.ensureStream();
      return bus;
    } catch (err) {
      await nc.close();
      throw err;
    }
  }

  /** The NATS connection, for the other components of the process that use NATS. */
  get connection(): NatsConnection {
    return this.nc;
  }

  private subject(runId: string, kind: RunEvent["kind"] | ">") {
    return `${this.options.subjectPrefix}.run.${runId}.${kind}`;
  }

  private ensureStream() {
    return ensureStream(this.jsm, {
      name: this.options.stream,
      subjects: [`${this.options.subjectPrefix}.run.>`],
      max_age: nanos(this.options.maxAgeSeconds * 1000),
      storage: StorageType.File,
      duplicate_window: nanos(Math.min(this.options.maxAgeSeconds, 120) * 1000),
    });
  }

  async publish(runId: string, kind: RunEvent["kind"], data: Uint8Array, dedupId: string) {
    await this.js.publish(this.subject(runId, kind), data, {
      msgID: dedupId,
      ...(tracingEnabled() ? { headers: traceHeaders() } : {}),
    });
  }

  /**
   * An ordered consumer from `afterSeq`. After the connection comes back from an outage (NATS
   * restarted), the subscription fails rather than trust the consumer to resume: its ephemeral
   * consumer may be gone and it can stall without a word. The caller subscribes again after the
   * last event it got (gateway/src/sse/run-relay.ts).
   */
  async *subscribe(runId: string, { afterSeq, signal }: SubscribeOptions) {
    const consumer = await this.js.consumers.get(this.options.stream, {
      filter_subjects: this.subject(runId, ">"),
      ...(afterSeq
        ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: afterSeq + 1 }
        : { deliver_policy: DeliverPolicy.All }),
    });
    const messages = await consumer.consume({ max_messages: 256 });
    const stop = () => void messages.stop();
    let reconnected = false;
    const stopWatching = onReconnect(this.nc, () => {
      reconnected = true;
      stop();
    });
    signal.addEventListener("abort", stop, { once: true });
    try {
      if (signal.aborted) return;
      for await (const m of messages) {
        const kind = m.subject.endsWith(".end")
          ? "end"
          : m.subject.endsWith(".repair")
            ? "repair"
            : "chunk";
        const traceparent = m.headers?.get("traceparent");
        yield {
          seq: m.seq,
          kind,
          data: m.data,
          ...(traceparent ? { traceparent } : {}),
        } satisfies RunEvent;
      }
      if (reconnected && !signal.aborted) {
        throw new Error("the NATS connection was re-established; subscribe again");
      }
    } finally {
      signal.removeEventListener("abort", stop);
      stop();
      stopWatching();
    }
  }

  async hasEnd(runId: string) {
    const msg = await this.jsm.streams.getMessage(this.options.stream, {
      last_by_subj: this.subject(runId, "end"),
    });
    return msg !== null;
  }

  ready(timeoutMs = 2000) {
    return natsReady(this.nc, timeoutMs);
  }

  async close() {
    if (!this.nc.isClosed()) await this.nc.drain();
  }
}

/** The current trace context as NATS message headers (tracing on only). */
export function traceHeaders() {
  const h = natsHeaders();
  const traceparent = currentTraceparent();
  if (traceparent) h.set("traceparent", traceparent);
  return h;
}
