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
import { ensureStream } from "./ensure-stream.js";
import type { Logger } from "../logger.js";

/**
 * Where the executor's result cache keeps its entries: opaque bytes by key, the last put of a key
 * winning, bounded in size (the oldest entries go first) and in age. An entry's own ttl is the
 * executor's to check (it is inside the entry), so one store serves every ttl.
 */
export interface ResultCacheStore {
  get(key: string): Promise<Uint8Array | undefined>;
  put(key: string, data: Uint8Array): Promise<void>;
}

export interface ResultCacheLimits {
  /** The most bytes the entries may take; past it the oldest go. */
  maxBytes: number;
  /** The longest an entry is kept, whatever its ttl. */
  maxAgeSeconds: number;
}

/**
 * The result cache on NATS JetStream, shared by every executor replica: stream
 * `<PIES_NATS_STREAM>_RESULTS`, subject `<prefix>.result.<key>`, one message per subject (a key's
 * last entry), `max_bytes` with the oldest discarded, `max_age`. This is what a NATS KV bucket is,
 * over the JetStream client the executor already has (a KV bucket with per-entry TTLs would need
 * NATS 2.11).
 */
export class JetStreamResultCache implements ResultCacheStore {
  private constructor(
    private readonly js: JetStreamClient,
    private readonly jsm: JetStreamManager,
    private readonly stream: string,
    private readonly prefix: string,
  ) {}

  static async over(
    nc: NatsConnection,
    options: ResultCacheLimits & {
      stream: string;
      subjectPrefix: string;
      /** How many nodes of the NATS cluster keep the cache (PIES_NATS_REPLICAS; default 1). */
      replicas?: number;
      /** Told when the cache's replicas change. */
      logger?: Logger;
    },
  ): Promise<JetStreamResultCache> {
    const jsm = await jetstreamManager(nc);
    const replicas = options.replicas ?? 1;
    await ensureStream(
      jsm,
      {
        name: options.stream,
        subjects: [`${options.subjectPrefix}.result.>`],
        max_msgs_per_subject: 1,
        max_bytes: options.maxBytes,
        max_age: nanos(options.maxAgeSeconds * 1000),
        discard: DiscardPolicy.Old,
        storage: StorageType.File,
        num_replicas: replicas,
      },
      {
        settings: { PIES_NATS_REPLICAS: replicas, PIES_RESULT_CACHE_MAX_BYTES: options.maxBytes },
        logger: options.logger,
      },
    );
    return new JetStreamResultCache(jetstream(nc), jsm, options.stream, options.subjectPrefix);
  }

  async get(key: string) {
    const msg = await this.jsm.streams.getMessage(this.stream, {
      last_by_subj: `${this.prefix}.result.${key}`,
    });
    return msg?.data;
  }

  async put(key: string, data: Uint8Array) {
    await this.js.publish(`${this.prefix}.result.${key}`, data);
  }
}

/** The result cache in the process (the embedded mode): an LRU bounded by the entries' bytes. */
export class MemoryResultCache implements ResultCacheStore {
  private readonly entries: LRUCache<string, Uint8Array>;

  constructor(limits: ResultCacheLimits) {
    this.entries = new LRUCache({
      maxSize: limits.maxBytes,
      sizeCalculation: (data) => Math.max(1, data.byteLength),
      ttl: limits.maxAgeSeconds * 1000,
    });
  }

  async get(key: string) {
    return this.entries.get(key);
  }

  async put(key: string, data: Uint8Array) {
    this.entries.set(key, data);
  }
}

/** The JetStream result cache of a process's settings. */
export function resultCacheFromConfig(
  nc: NatsConnection,
  config: {
    PIES_NATS_STREAM: string;
    PIES_NATS_SUBJECT_PREFIX: string;
    PIES_RESULT_CACHE_MAX_BYTES: number;
    PIES_RESULT_CACHE_MAX_AGE_SECONDS: number;
    PIES_NATS_REPLICAS?: number;
  },
  logger?: Logger,
): Promise<JetStreamResultCache> {
  return JetStreamResultCache.over(nc, {
    stream: `${config.PIES_NATS_STREAM}_RESULTS`,
    subjectPrefix: config.PIES_NATS_SUBJECT_PREFIX,
    maxBytes: config.PIES_RESULT_CACHE_MAX_BYTES,
    maxAgeSeconds: config.PIES_RESULT_CACHE_MAX_AGE_SECONDS,
    replicas: config.PIES_NATS_REPLICAS,
    logger,
  });
}
