import {
  createInbox,
  headers as natsHeaders,
  nanos,
  type MsgHdrs,
  type NatsConnection,
} from "@nats-io/transport-node";
import {
  AckPolicy,
  DeliverPolicy,
  DiscardPolicy,
  JetStreamApiCodes,
  JetStreamApiError,
  PubHeaders,
  jetstream,
  type ApiError,
  jetstreamManager,
  StorageType,
  type Consumer,
  type ConsumerMessages,
  type JetStreamClient,
  type JetStreamManager,
  type JsMsg,
} from "@nats-io/jetstream";
import { setTimeout as sleep } from "node:timers/promises";
import { ensureStream } from "./ensure-stream.js";
import { maxDataBytes, natsReady } from "./nats.js";
import { traceHeaders } from "./jetstream-bus.js";
import { contextOf, inSpan, SpanKind, tracingEnabled } from "../tracing.js";
import type { Logger } from "../logger.js";
import {
  RecordConflict,
  MAX_BATCH,
  MAX_BATCH_BYTES,
  RecordTooLarge,
  retryDelayMs,
  takeBatch,
  type ConsumeOptions,
  type RecordBatchWriter,
  type RunRecord,
  type RunRecords,
} from "./run-records.js";

export interface JetStreamRecordsOptions {
  /** The stream's name (`<PIES_NATS_STREAM>_RECORDS`). */
  stream: string;
  subjectPrefix: string;
  /** How long a record is kept: the longest the runs store may fall behind without losing one. */
  maxAgeSeconds: number;
  /**
   * The most bytes the log keeps (PIES_RECORD_MAX_BYTES; 0 or none: bounded by age alone); past it
   * a put is refused, so that no record is dropped before it is written.
   */
  maxBytes?: number;
  /** How many nodes of the NATS cluster keep the log (PIES_NATS_REPLICAS; default 1). */
  replicas?: number;
  /** Told when the log's replicas change. */
  logger?: Logger;
}

/** What the record log holds, for the runs service's metrics (JetStreamRunRecords.state). */
export interface RecordLogState {
  messages: number;
  bytes: number;
  /** The log's byte bound; -1: none. */
  maxBytes: number;
  /** Records the writers have not acknowledged: the writers' lag, in records. */
  pending?: number;
}

/** How long a put waits for JetStream's acknowledgement (nats.js's JetStream default). */
const PUT_TIMEOUT_MS = 5000;

interface UnansweredPut {
  runId: string;
  resolve: (seq: number) => void;
  reject: (err: unknown) => void;
  deadline: number;
}

/**
 * Settles a put with JetStream's answer: `{stream, seq, duplicate?}` (a repeat of a put within the
 * duplicate window answers the first one's sequence), `{error: {err_code, description}}`, or no
 * data with status 503 when no stream takes the subject.
 */
function settlePut(put: UnansweredPut, data: Uint8Array, status: number | undefined) {
  if (data.length === 0) {
    put.reject(
      new Error(
        status === 503
          ? "no JetStream stream answered the record's put"
          : `the record log answered the put with status ${status ?? "none"}`,
      ),
    );
    return;
  }
  let ack: { stream?: string; seq?: number; error?: ApiError };
  try {
    ack = JSON.parse(Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString()) as {
      stream?: string;
      seq?: number;
      error?: ApiError;
    };
  } catch {
    put.reject(new Error("the record log's acknowledgement is not JSON"));
    return;
  }
  if (ack.error) {
    put.reject(
      ack.error.err_code === JetStreamApiCodes.StreamWrongLastSequence
        ? new RecordConflict(put.runId)
        : new JetStreamApiError(ack.error),
    );
  } else if (!ack.stream || typeof ack.seq !== "number") {
    put.reject(new Error("the record log's acknowledgement names no stream and sequence"));
  } else {
    put.resolve(ack.seq);
  }
}

/** The durable consumer that the runs service's replicas share. */
const WRITER = "runs-store";
/** Records delivered to a writer and not yet acknowledged, per replica. */
const MAX_IN_FLIGHT = 4096;
/**
 * JetStream's answers to an add of a consumer that exists with another start (made again from its
 * floor, remakeConsumer): 10012 on nats-server 2.9 ("deliver policy can not be updated"), 10148 on
 * 2.10 and later ("consumer already exists").
 */
const EXISTS_OTHERWISE = new Set([10012, 10148]);
/**
 * How long a record delivered to a writer may go unacknowledged before JetStream delivers it again
 * (to any replica): what a replica that dies mid-batch delays its records by. A writer retrying a
 * batch while the database is down says it is still working on it at each attempt (at most every
 * 5 s), so this only has to be longer than that.
 */
const ACK_WAIT_MS = 10_000;
/** The writers' consumer: from the log's first record (remakeConsumer: from its floor). */
const WRITER_CONFIG = {
  durable_name: WRITER,
  ack_policy: AckPolicy.Explicit,
  deliver_policy: DeliverPolicy.All,
  ack_wait: nanos(ACK_WAIT_MS),
  max_ack_pending: MAX_IN_FLIGHT * 4,
};
/**
 * How long JetStream waits before it delivers again the records a stopping writer hands back.
 * Naks without a delay, once the writer's pull was stopped, came back wrong on nats-server 2.9.10
 * (seen): the first record only after the ack wait, the last one twice; with any delay each came
 * back once, to the next pull.
 */
const NAK_DELAY_MS = 50;
/**
 * How long a writer's pull waits before it is made again (its heartbeats come at half of it):
 * nats.js's default is 30 s, which made a writer whose pull was lost with a NATS node wait a
 * minute (two missed heartbeats) before it pulled again.
 */
const PULL_EXPIRES_MS = 10_000;
/**
 * Heartbeats missed in a row past which the writer's pull is dropped and made anew, consumer
 * first: nats.js pulls again itself from two on, which does not bring back a consumer whose
 * state was lost with a node.
 */
const STALL_HEARTBEATS = 4;
/**
 * How long a writer may receive nothing while its consumer holds records for it before its pull
 * is made anew (checked every STALL_CHECK_MS, with one consumer info request): a pull the server
 * forgot when the consumer's leader moved sends no heartbeats to miss only once it is expired.
 */
const STALL_MS = 20_000;
const STALL_CHECK_MS = 5_000;
/**
 * How long a writer whose consumer was deleted under it waits before it adds it again: a replica
 * that deletes it makes it again from its floor at once, and an add here first would start it at
 * the log's first record.
 */
const CONSUMER_GONE_PAUSE_MS = 5_000;

const isExistsOtherwise = (err: unknown) =>
  err instanceof JetStreamApiError && EXISTS_OTHERWISE.has(err.code);
const isConsumerNotFound = (err: unknown) =>
  err instanceof JetStreamApiError && err.code === JetStreamApiCodes.ConsumerNotFound;

/** What a writer's watch read of its consumer when it found its pull stalled. */
export interface StallSample {
  /**
   * JetStream held records it could deliver (not delivered to anyone, room under
   * max_ack_pending) while a pull waited for them.
   */
  undelivered: boolean;
  /** The last record the consumer delivered, to any writer. */
  deliveredSeq: number;
}

/** Whether a consumer's state is a StallSample's `undelivered`. */
export function undeliveredIn(info: {
  num_waiting: number;
  num_pending: number;
  num_ack_pending: number;
  config: { max_ack_pending?: number };
}): boolean {
  return (
    info.num_waiting > 0 &&
    info.num_pending > 0 &&
    info.num_ack_pending < (info.config.max_ack_pending ?? Infinity)
  );
}

/**
 * Whether two stalls in a row (nothing received between) say the consumer, not the writer's
 * pull, is stuck: it could deliver at both, and delivered nothing to anyone between them (another
 * replica that still receives moves `deliveredSeq`, and then the trouble is this writer's own).
 */
export function consumerStuck(previous: StallSample | undefined, now: StallSample): boolean {
  return (
    previous !== undefined &&
    previous.undelivered &&
    now.undelivered &&
    now.deliveredSeq === previous.deliveredSeq
  );
}

/**
 * Tells JetStream about each message. An acknowledgement is a publish, which throws once the
 * connection is closed (shutdown): a record not acknowledged is delivered again, so that is no
 * loss, and it must not reject the batch loop that nothing awaits.
 */
function settle(batch: JsMsg[], tell: (m: JsMsg) => void) {
  try {
    for (const m of batch) tell(m);
  } catch {
    // The connection is gone: the records come again.
  }
}

/**
 * The run record log on NATS JetStream: subject `<prefix>.record.<runId>`, one message kept per
 * subject (each run's last record; an earlier one is replaced), for `maxAgeSeconds` and within
 * `maxBytes` (a put to a full log is refused rather than the oldest record dropped). A put is an
 * acknowledged publish, so it is durable once it resolves; conditional puts use JetStream's
 * expected last subject sequence. The runs service consumes the stream through one durable
 * consumer, in batches.
 */
export class JetStreamRunRecords implements RunRecords {
  private constructor(
    private readonly nc: NatsConnection,
    private readonly js: JetStreamClient,
    private readonly jsm: JetStreamManager,
    private readonly options: JetStreamRecordsOptions,
  ) {}

  /** Over the process's NATS connection (which the caller keeps and closes). */
  static async over(nc: NatsConnection, options: JetStreamRecordsOptions) {
    const records = new JetStreamRunRecords(nc, jetstream(nc), await jetstreamManager(nc), options);
    await records.ensureStream();
    records.listen();
    return records;
  }

  /** The largest record a put takes (maxDataBytes). */
  get maxRecordBytes(): number | undefined {
    return maxDataBytes(this.nc);
  }

  private subject(runId: string) {
    return `${this.options.subjectPrefix}.record.${runId}`;
  }

  private ensureStream() {
    const replicas = this.options.replicas ?? 1;
    const maxBytes = this.options.maxBytes || -1;
    return ensureStream(
      this.jsm,
      {
        name: this.options.stream,
        subjects: [`${this.options.subjectPrefix}.record.>`],
        max_msgs_per_subject: 1,
        max_age: nanos(this.options.maxAgeSeconds * 1000),
        max_bytes: maxBytes,
        // Full, the log refuses a put (the executor retries it) rather than drop the oldest record,
        // written or not. A run's record still replaces its earlier one (the subject's limit).
        discard: DiscardPolicy.New,
        storage: StorageType.File,
        duplicate_window: nanos(Math.min(this.options.maxAgeSeconds, 120) * 1000),
        num_replicas: replicas,
      },
      {
        settings: {
          PIES_NATS_REPLICAS: replicas,
          PIES_RECORD_MAX_BYTES: this.options.maxBytes ?? 0,
        },
        logger: this.options.logger,
      },
    );
  }

  /** Puts waiting for the end of this turn of the event loop (see put). */
  private queued: (() => void)[] = [];

  /**
   * Publishes the record at the end of this turn of the event loop, with every other put made
   * meanwhile: nats.js writes what is published in one microtask to its socket at once, but each
   * execution ends in its own callback (its provider's answer), so without this every put was a
   * socket write of its own (a write to nats-server on loopback: the largest single cost of a
   * put). A put waits for no more than what is already ready to run.
   */
  put(runId: string, data: Uint8Array, options: { dedupId: string; expectSeq?: number }) {
    return new Promise<number>((resolve, reject) => {
      // Made here, in the caller's context: the trace is this put's (the turn's callback runs in
      // the context of whichever put scheduled it), and a header nats.js refuses fails this put
      // alone (thrown in the executor, it rejects).
      const headers = tracingEnabled() ? traceHeaders() : natsHeaders();
      headers.set(PubHeaders.MsgIdHdr, options.dedupId);
      if (options.expectSeq !== undefined) {
        headers.set(PubHeaders.ExpectedLastSubjectSequenceHdr, String(options.expectSeq));
      }
      if (this.queued.length === 0) setImmediate(this.publishQueued);
      this.queued.push(() => void this.publish(runId, data, headers).then(resolve, reject));
    });
  }

  private readonly publishQueued = () => {
    const queued = this.queued;
    this.queued = [];
    for (const publish of queued) publish();
  };

  /**
   * Publishes a record and resolves with JetStream's acknowledgement: its sequence. Not through
   * nats.js's JetStream client, whose publish is a request (a timer, a reply token and its
   * bookkeeping per publish, and an Error with a stack built when each request is settled, even a
   * successful one; profiled: docs/decisions/0014-record-put-without-reflection.md): the reply
   * subject is a token under this log's own inbox, whose one subscription settles the put; puts
   * still unanswered after PUT_TIMEOUT_MS (a lost connection) fail, as the request would.
   */
  private publish(runId: string, data: Uint8Array, headers: MsgHdrs): Promise<number> {
    // nats.js would throw too, but as an error a retry could not tell from a lost connection.
    const limit = this.maxRecordBytes;
    if (limit !== undefined && data.length > limit) {
      return Promise.reject(new RecordTooLarge(runId, data.length, limit));
    }
    return new Promise<number>((resolve, reject) => {
      const token = (this.nextToken++).toString(36);
      this.unanswered.set(token, { runId, resolve, reject, deadline: Date.now() + PUT_TIMEOUT_MS });
      this.sweeper ??= setInterval(this.sweep, 1000).unref();
      try {
        this.nc.publish(this.subject(runId), data, { reply: this.acks + token, headers });
      } catch (err) {
        this.unanswered.delete(token);
        reject(err);
      }
    });
  }

  /** The subject prefix of this log's acknowledgements (`_INBOX.<unique>.`). */
  private readonly acks = `${createInbox()}.`;
  private readonly unanswered = new Map<string, UnansweredPut>();
  private nextToken = 0;
  private sweeper: NodeJS.Timeout | undefined;

  /** Receives the acknowledgements (made once, with the log). */
  private listen() {
    this.nc.subscribe(`${this.acks}*`, {
      callback: (err, msg) => {
        // The subscription failed (a permission refused): nothing it waits for will come.
        if (err) return this.failUnanswered(err);
        const token = msg.subject.slice(this.acks.length);
        const put = this.unanswered.get(token);
        if (!put) return;
        this.unanswered.delete(token);
        settlePut(put, msg.data, msg.headers?.code);
      },
    });
    // Closed (shutdown): the puts still waiting fail at once, as nats.js's requests did.
    void this.nc
      .closed()
      .then(() => this.failUnanswered(new Error("the NATS connection is closed")));
  }

  private failUnanswered(err: unknown) {
    for (const put of this.unanswered.values()) put.reject(err);
    this.unanswered.clear();
  }

  /** Fails the puts left unanswered past their deadline; stops when none is waiting. */
  private readonly sweep = () => {
    const now = Date.now();
    for (const [token, put] of this.unanswered) {
      if (put.deadline > now) continue;
      this.unanswered.delete(token);
      put.reject(
        new Error(`the record log did not acknowledge the put within ${PUT_TIMEOUT_MS} ms`),
      );
    }
    if (this.unanswered.size === 0) {
      clearInterval(this.sweeper);
      this.sweeper = undefined;
    }
  };

  async last(runId: string) {
    // The stream's leader answers (not a direct get, which any replica may serve from behind).
    const msg = await this.jsm.streams.getMessage(this.options.stream, {
      last_by_subj: this.subject(runId),
    });
    const traceparent = msg?.header?.get("traceparent");
    return msg
      ? { runId, seq: msg.seq, data: msg.data, ...(traceparent ? { traceparent } : {}) }
      : undefined;
  }

  /**
   * What the log holds now (its records and their bytes, and its byte bound: -1 for none) and how
   * many of them the writers have not acknowledged yet (`pending`: not delivered, or delivered and
   * not yet written; absent before the runs service made its consumer). Two JetStream requests, to
   * the stream's leader: for a metrics scrape, not for a hot path.
   */
  async state(): Promise<RecordLogState> {
    const info = await this.jsm.streams.info(this.options.stream);
    const writer = await this.jsm.consumers.info(this.options.stream, WRITER).catch((err) => {
      if (err instanceof JetStreamApiError && err.code === JetStreamApiCodes.ConsumerNotFound) {
        return undefined;
      }
      throw err;
    });
    return {
      messages: info.state.messages,
      bytes: info.state.bytes,
      maxBytes: info.config.max_bytes,
      ...(writer ? { pending: writer.num_pending + writer.num_ack_pending } : {}),
    };
  }

  consume(write: RecordBatchWriter, options: ConsumeOptions) {
    const stop = new AbortController();
    const loop = this.consumeLoop(write, options, stop.signal);
    return {
      async stop() {
        stop.abort();
        await loop;
      },
    };
  }

  /**
   * Pulls records and writes them as they come: what arrives while a batch is being written forms
   * the next batch, so a batch is one record when the load is light and grows with it; a batch
   * starts no sooner than `batchIntervalMs` after the previous one unless a full one (by count or
   * by bytes) is waiting, or fills while it waits. Records not written when it stops are handed
   * back (nak) to be delivered again at once. A consumer that fails (NATS restarted, the consumer
   * was lost) is made again after a pause.
   */
  private async consumeLoop(
    write: RecordBatchWriter,
    {
      onError,
      onBehind,
      onStall,
      maxBatch = MAX_BATCH,
      maxBatchBytes,
      batchIntervalMs = 0,
    }: ConsumeOptions,
    signal: AbortSignal,
  ) {
    const prefix = `${this.options.subjectPrefix}.record.`;
    let lastBatch = -Infinity;
    // The last stall's sample of the consumer, until a record comes (consumerStuck), and the
    // record the consumer is made again from once it is decided (kept across failed attempts, so
    // that an attempt cut between the delete and the add still starts there).
    let lastStall: StallSample | undefined;
    let remake = false;
    let remakeFrom: number | undefined;
    // The consumer was deleted under this writer: another replica may be making it again from its
    // floor, which an add here must not get ahead of (it would start at the log's first record).
    let consumerGone = false;
    for (let failures = 0; !signal.aborted;) {
      try {
        if (remake) {
          // Gone before its floor was read (another replica deleted it): the add below makes it.
          remakeFrom ??= await this.consumerFloor().catch((err) => {
            if (isConsumerNotFound(err)) return undefined;
            throw err;
          });
          if (remakeFrom !== undefined) await this.remakeConsumer(remakeFrom);
          remake = false;
          remakeFrom = undefined;
        }
        await this.addWriterConsumer();
        const consumer = await this.js.consumers.get(this.options.stream, WRITER);
        const messages = await consumer.consume({
          max_messages: MAX_IN_FLIGHT,
          expires: PULL_EXPIRES_MS,
        });
        const abort = () => void messages.stop();
        signal.addEventListener("abort", abort, { once: true });
        const buffer: JsMsg[] = [];
        let buffered = 0; // the buffer's record bytes
        const byteBound = maxBatchBytes ?? MAX_BATCH_BYTES;
        // A batch taken now would be as large as a batch may be: it waits for nothing.
        const full = () => buffer.length >= maxBatch || buffered >= byteBound;
        // Ends the wait for the interval (set while it waits): a batch filled, or the consumer
        // stops.
        let wake: (() => void) | undefined;
        let writing: Promise<void> | undefined;
        let received = performance.now();
        const writeBatches = async () => {
          while (buffer.length > 0) {
            // What arrives meanwhile joins this batch: a batch's statement, commit and
            // acknowledgements cost PostgreSQL, NATS and this process about as much as its
            // records do when it holds a few, which a steady flow makes it. The time is read
            // again after each wait (a timer counts whole milliseconds: it may end a little early).
            for (
              let wait = lastBatch + batchIntervalMs - performance.now();
              wait > 0 && !full() && !signal.aborted;
              wait = lastBatch + batchIntervalMs - performance.now()
            ) {
              await new Promise<void>((resolve) => {
                const done = () => {
                  wake = undefined;
                  clearTimeout(timer);
                  signal.removeEventListener("abort", done);
                  resolve();
                };
                const timer = setTimeout(done, Math.ceil(wait));
                signal.addEventListener("abort", done, { once: true });
                wake = done;
              });
            }
            lastBatch = performance.now();
            const batch = takeBatch(buffer, (m) => m.data.length, maxBatch, byteBound);
            for (const m of batch) buffered -= m.data.length;
            let written = false;
            for (let attempt = 0; !written && !signal.aborted; attempt++) {
              if (onBehind) this.checkBehind(batch, onBehind);
              try {
                const records = batch.map((m) => ({
                  runId: m.subject.slice(prefix.length),
                  seq: m.seq,
                  data: m.data,
                }));
                await (tracingEnabled() ? tracedWrite(write, records, batch) : write(records));
                written = true;
              } catch (err) {
                onError(err, attempt);
                // Held longer than the ack wait, the records would be delivered again elsewhere.
                settle(batch, (m) => m.working());
                await sleep(retryDelayMs(attempt), undefined, { signal }).catch(() => {});
              }
            }
            // Unwritten at shutdown (waiting out the interval, or failing): handed back, to be
            // delivered again at once (to another replica) rather than after the ack wait.
            settle(batch, written ? (m) => m.ack() : (m) => m.nak(NAK_DELAY_MS));
          }
          writing = undefined;
          // A write that took long (the database down) is no time without records.
          received = performance.now();
        };
        // The pull, dropped when it no longer brings records (see STALL_HEARTBEATS, STALL_MS):
        // the loop makes the consumer and a pull again.
        const stalled = (reason: string, sample?: StallSample, gone = false) => {
          if (signal.aborted) return;
          remake = sample !== undefined && consumerStuck(lastStall, sample);
          lastStall = sample;
          consumerGone = gone;
          onStall?.(
            remake ? `${reason}, again: the consumer is made again from its floor` : reason,
          );
          void messages.stop();
        };
        const watching = this.watchPull(messages, consumer, {
          received: () => (buffer.length > 0 || writing ? performance.now() : received),
          stalled,
        });
        try {
          for await (const m of messages) {
            received = performance.now();
            lastStall = undefined;
            buffer.push(m);
            buffered += m.data.length;
            if (full()) wake?.();
            writing ??= writeBatches();
          }
          await writing;
        } finally {
          signal.removeEventListener("abort", abort);
          watching.stop();
        }
        // The consumer ended without an error (stopped, or deleted under us): made again, after
        // the replica that may be making it again from its floor when it was deleted.
        const pause = consumerGone ? CONSUMER_GONE_PAUSE_MS : 500;
        consumerGone = false;
        if (!signal.aborted) await sleep(pause, undefined, { signal }).catch(() => {});
        failures = 0;
      } catch (err) {
        if (signal.aborted) return;
        onError(err, failures);
        await sleep(retryDelayMs(failures++), undefined, { signal }).catch(() => {});
      }
    }
  }

  /**
   * Watches a writer's pull until stopped, and calls `stalled` once when it no longer brings
   * records: STALL_HEARTBEATS heartbeats missed in a row, the consumer or stream not found, or
   * nothing received for STALL_MS (`received()`: when the last record came, or now while the
   * writer holds records) while the consumer has records for it (not delivered, or delivered and
   * not acknowledged: delivered into a pull that was lost, they wait for the ack wait and a pull).
   * `undelivered`: JetStream has this pull, and records it could deliver to it (not delivered to
   * anyone, and room under max_ack_pending), which a consumer whose state a lost node left wrong
   * does (nats-server 2.9).
   */
  private watchPull(
    messages: ConsumerMessages,
    consumer: Consumer,
    {
      received,
      stalled,
    }: {
      received: () => number;
      stalled: (reason: string, sample?: StallSample, gone?: boolean) => void;
    },
  ) {
    let done = false;
    const stall = (reason: string, sample?: StallSample, gone = false) => {
      if (done) return;
      done = true;
      stalled(reason, sample, gone);
    };
    // A check that found nothing held counts as news: an idle writer asks every STALL_MS.
    let checkedAt = performance.now();
    const quietFor = () => performance.now() - Math.max(received(), checkedAt);
    void (async () => {
      for await (const note of messages.status()) {
        if (done) break;
        if (note.type === "heartbeats_missed" && note.count >= STALL_HEARTBEATS) {
          stall(`${note.count} heartbeats missed`);
        } else if (
          note.type === "consumer_not_found" ||
          note.type === "consumer_deleted" ||
          note.type === "stream_not_found"
        ) {
          stall(note.type.replaceAll("_", " "), undefined, true);
        }
      }
    })().catch(() => {});
    let checking = false;
    const timer = setInterval(() => {
      if (done || checking || quietFor() < STALL_MS) return;
      checking = true;
      consumer
        .info()
        .then((info) => {
          const held = info.num_pending + info.num_ack_pending;
          if (held === 0) checkedAt = performance.now();
          else if (performance.now() - received() >= STALL_MS) {
            stall(
              `nothing received for ${STALL_MS / 1000} s: ${info.num_pending} records not ` +
                `delivered, ${info.num_ack_pending} not acknowledged, ${info.num_waiting} pulls ` +
                `waiting, delivered to ${info.delivered.stream_seq}, acknowledged to ` +
                `${info.ack_floor.stream_seq}`,
              { undelivered: undeliveredIn(info), deliveredSeq: info.delivered.stream_seq },
            );
          }
        })
        // Unanswered (the consumer's leader is being elected): asked again at the next check.
        .catch(() => {})
        .finally(() => (checking = false));
    }, STALL_CHECK_MS);
    timer.unref();
    return {
      stop() {
        done = true;
        clearInterval(timer);
      },
    };
  }

  /**
   * Deletes the writers' consumer and makes it again from the record after its acknowledged floor
   * (every record before it is written): what brings back a consumer that holds records and
   * delivers none. Records acknowledged past the floor come again, and are written again as they
   * were (a write is idempotent).
   */
  async remakeConsumer(from?: number) {
    const { stream } = this.options;
    const start = from ?? (await this.consumerFloor());
    await this.jsm.consumers.delete(stream, WRITER).catch((err) => {
      if (!isConsumerNotFound(err)) throw err;
    });
    await this.jsm.consumers
      .add(stream, {
        ...WRITER_CONFIG,
        deliver_policy: DeliverPolicy.StartSequence,
        opt_start_seq: start,
      })
      .catch((err) => {
        // Made again meanwhile (by another replica, or this attempt's add answered late).
        if (!isExistsOtherwise(err)) throw err;
      });
  }

  /** The record after the writers' consumer's acknowledged floor: where remakeConsumer starts. */
  private async consumerFloor(): Promise<number> {
    const info = await this.jsm.consumers.info(this.options.stream, WRITER);
    return info.ack_floor.stream_seq + 1;
  }

  /**
   * Adds the writers' consumer (an add of the same settings is no change). One made again from
   * its acknowledged floor (remakeConsumer) starts there, which an add cannot change: it is used
   * as it is.
   */
  private async addWriterConsumer() {
    await this.jsm.consumers.add(this.options.stream, WRITER_CONFIG).catch((err) => {
      // (The consumer is read next, by consumers.get.)
      if (!isExistsOtherwise(err)) throw err;
    });
  }

  /**
   * Tells `onBehind` how old the batch's oldest record is when that is more than half the log's
   * maximum age: past it, JetStream drops a record whether or not it was written, and nothing else
   * says so (the consumer skips what is gone). One record is read (the first: the log delivers in
   * order, and a batch is taken from the front), so a batch costs one timestamp.
   */
  private checkBehind(batch: JsMsg[], onBehind: NonNullable<ConsumeOptions["onBehind"]>) {
    const first = batch[0];
    if (!first) return;
    const behindSeconds = (Date.now() - first.info.timestampNanos / 1e6) / 1000;
    if (behindSeconds > this.options.maxAgeSeconds / 2) {
      onBehind(behindSeconds, this.options.maxAgeSeconds);
    }
  }

  ready() {
    return natsReady(this.nc);
  }
}

/** The record log of a component's NATS settings: stream `<PIES_NATS_STREAM>_RECORDS`. */
export function recordsFromConfig(
  nc: NatsConnection,
  config: {
    PIES_NATS_STREAM: string;
    PIES_NATS_SUBJECT_PREFIX: string;
    PIES_RECORD_MAX_AGE_SECONDS: number;
    PIES_RECORD_MAX_BYTES?: number;
    PIES_NATS_REPLICAS?: number;
  },
  logger?: Logger,
): Promise<JetStreamRunRecords> {
  return JetStreamRunRecords.over(nc, {
    stream: `${config.PIES_NATS_STREAM}_RECORDS`,
    subjectPrefix: config.PIES_NATS_SUBJECT_PREFIX,
    maxAgeSeconds: config.PIES_RECORD_MAX_AGE_SECONDS,
    maxBytes: config.PIES_RECORD_MAX_BYTES,
    replicas: config.PIES_NATS_REPLICAS,
    logger,
  });
}

/**
 * The batch's write, seen from each record's trace (tracing on only): one span per traced record,
 * child of the put that made it, lasting the whole batch write.
 */
async function tracedWrite(write: RecordBatchWriter, records: RunRecord[], batch: JsMsg[]) {
  const spans = batch.flatMap((m, i) => {
    const traceparent = m.headers?.get("traceparent");
    const runId = records[i]?.runId ?? "";
    if (!traceparent) return [];
    let end!: () => void;
    const ended = new Promise<void>((resolve) => (end = resolve));
    const span = inSpan(
      "runs.record.store",
      {
        kind: SpanKind.CONSUMER,
        parent: contextOf(traceparent),
        attributes: { "pies.run_id": runId, "pies.batch_size": batch.length },
      },
      () => ended,
    );
    return [{ end, span }];
  });
  try {
    await write(records);
  } finally {
    for (const s of spans) s.end();
    await Promise.all(spans.map((s) => s.span));
  }
}
