import { nanos, type NatsConnection } from "@nats-io/transport-node";
import {
  DiscardPolicy,
  jetstream,
  jetstreamManager,
  StorageType,
  type JetStreamClient,
  type JetStreamManager,
} from "@nats-io/jetstream";
import { LRUCache } from "lru-cache";
import type { Logger } from "../logger.js";
import { ensureStream } from "./ensure-stream.js";

/**
 * Where a streamed run of a metadata-only interaction waits for its stream with its input (its
 * parameters and rendered prompt): its records carry none, and the executor that starts it may not
 * be the one that created it. Opaque bytes by run, kept at most `maxAgeSeconds` and dropped (erased)
 * once the run has started (docs/decisions/0063-metadata-only-runs.md).
 */
export interface RunInputs {
  /** The longest an input is kept: a metadata-only run's ttl is at most this. */
  readonly maxAgeSeconds: number;
  put(runId: string, data: Uint8Array): Promise<void>;
  /** The run's input, unless it was dropped or aged out. */
  get(runId: string): Promise<Uint8Array | undefined>;
  drop(runId: string): Promise<void>;
}

/**
 * The inputs on NATS JetStream, shared by every executor replica: stream
 * `<PIES_NATS_STREAM>_INPUTS`, subject `<prefix>.input.<runId>`, one message per subject, for as
 * long as run events are kept (`max_age`). A drop deletes the message with erasure, so that its
 * bytes do not linger in the stream's files.
 */
export class JetStreamRunInputs implements RunInputs {
  private constructor(
    private readonly js: JetStreamClient,
    private readonly jsm: JetStreamManager,
    private readonly stream: string,
    private readonly prefix: string,
    readonly maxAgeSeconds: number,
  ) {}

  static async over(
    nc: NatsConnection,
    options: {
      stream: string;
      subjectPrefix: string;
      maxAgeSeconds: number;
      replicas?: number;
      logger?: Logger;
    },
  ): Promise<JetStreamRunInputs> {
    const jsm = await jetstreamManager(nc);
    const replicas = options.replicas ?? 1;
    await ensureStream(
      jsm,
      {
        name: options.stream,
        subjects: [`${options.subjectPrefix}.input.>`],
        max_msgs_per_subject: 1,
        max_age: nanos(options.maxAgeSeconds * 1000),
        discard: DiscardPolicy.Old,
        storage: StorageType.File,
        num_replicas: replicas,
      },
      { settings: { PIES_NATS_REPLICAS: replicas }, logger: options.logger },
    );
    return new JetStreamRunInputs(
      jetstream(nc),
      jsm,
      options.stream,
      options.subjectPrefix,
      options.maxAgeSeconds,
    );
  }

  private subject(runId: string) {
    return `${this.prefix}.input.${runId}`;
  }

  async put(runId: string, data: Uint8Array) {
    await this.js.publish(this.subject(runId), data);
  }

  async get(runId: string) {
    const msg = await this.jsm.streams.getMessage(this.stream, {
      last_by_subj: this.subject(runId),
    });
    return msg?.data;
  }

  async drop(runId: string) {
    const msg = await this.jsm.streams.getMessage(this.stream, {
      last_by_subj: this.subject(runId),
    });
    if (msg) await this.jsm.streams.deleteMessage(this.stream, msg.seq, true);
  }
}

/** The most bytes of inputs kept in memory; past it the oldest go (their runs fail to start). */
const MEMORY_MAX_BYTES = 64 * 1024 * 1024;

/** The inputs in the process (the embedded mode, one executor): an LRU bounded in bytes and age. */
export class MemoryRunInputs implements RunInputs {
  private readonly inputs: LRUCache<string, Uint8Array>;

  constructor(
    readonly maxAgeSeconds: number,
    maxBytes = MEMORY_MAX_BYTES,
  ) {
    this.inputs = new LRUCache({
      maxSize: maxBytes,
      sizeCalculation: (data) => Math.max(1, data.byteLength),
      ttl: maxAgeSeconds * 1000,
    });
  }

  async put(runId: string, data: Uint8Array) {
    this.inputs.set(runId, data);
  }

  async get(runId: string) {
    return this.inputs.get(runId);
  }

  async drop(runId: string) {
    this.inputs.delete(runId);
  }
}

/** The JetStream inputs of a process's settings. */
export function runInputsFromConfig(
  nc: NatsConnection,
  config: {
    PIES_NATS_STREAM: string;
    PIES_NATS_SUBJECT_PREFIX: string;
    PIES_STREAM_MAX_AGE_SECONDS: number;
    PIES_NATS_REPLICAS?: number;
  },
  logger?: Logger,
): Promise<JetStreamRunInputs> {
  return JetStreamRunInputs.over(nc, {
    stream: `${config.PIES_NATS_STREAM}_INPUTS`,
    subjectPrefix: config.PIES_NATS_SUBJECT_PREFIX,
    maxAgeSeconds: config.PIES_STREAM_MAX_AGE_SECONDS,
    replicas: config.PIES_NATS_REPLICAS,
    logger,
  });
}
