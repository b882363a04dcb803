import { performance } from "node:perf_hooks";
import pg from "pg";
import { readSseIncrementally, type SseEvent } from "./sse.js";

/** What a bounded load runs against: the gateway, a key, an interaction per kind of execution. */
export interface LoadOptions {
  gatewayUrl: string;
  key: string;
  /** Executed blocking by half the clients (`POST /interactions/:id/execute`). */
  blockingInteraction: string;
  /** Run streamed by the other half (`POST /runs {stream: true}`, then its stream to `close`). */
  streamedInteraction: string;
  clients: number;
  requestTimeoutMs?: number;
  /** Whether the test has the gateway down now (its connection errors are then expected). */
  gatewayDown?: () => boolean;
  /**
   * Share (0–1, default 0) of streamed runs whose client reconnects as real ones do: every
   * round(1/share)-th streamed run. In turn: after `close`, the stream opened again with the
   * Last-Event-ID of a middle event (`resume`) or with none (`replay`, the whole run again); or
   * the connection dropped after the first event and opened again with its id (`drop`). These
   * are the streams that leave the gateway's live path for the bus's replay.
   */
  reconnectShare?: number;
  /**
   * Whether a stream that ends with an `error` event (the gateway's word that it cannot go on, which
   * the client sees) is an expected failure, as while a NATS cluster elects new leaders; by default
   * it is a stream that ended without `close`.
   */
  errorEventsExpected?: boolean;
  /** Told of every operation as it ends (per-interval figures: `npm run soak`). */
  onOperation?: (operation: Operation) => void;
}

/** One operation of a client, as it ended. */
export interface Operation {
  /** `reopen`: a stream opened again after `close` (the `drop` reconnect is part of its run's). */
  kind: "blocking" | "streamed" | "reopen";
  ok: boolean;
  /** Blocking: the request; streamed: create to `close`; reopen: the second stream to `close`. */
  latencyMs: number;
  /** Date.now() when it ended. */
  endedAt: number;
}

/** How a reconnecting client opens a run's stream again (see LoadOptions.reconnectShare). */
export type Reconnect = "resume" | "replay" | "drop";
const RECONNECTS: Reconnect[] = ["resume", "replay", "resume", "replay", "drop"];

/** What the clients saw. */
export interface LoadReport {
  requests: number;
  succeeded: number;
  /** Failures allowed during faults: 503/502/504 in pies' shape, and the gateway being killed. */
  expectedErrors: Record<string, number>;
  /** Failures that break pies' promises (500, 409, a reset from a gateway that is up, …). */
  unexpectedErrors: Record<string, number>;
  /** One example per unexpected kind. */
  examples: Record<string, string>;
  /** Runs answered as completed: by a blocking execution, or by a stream's `close`. */
  completedRunIds: string[];
  /** Every run id a client learnt (created streamed runs included). */
  runIds: string[];
  streams: {
    opened: number;
    closed: number;
    /** Ended with an `error` event, when errorEventsExpected (else they count as cut). */
    errored: number;
    cutWhileGatewayDown: number;
    cut: number;
  };
  /** Streams opened again by reconnecting clients, by kind, and how many of them ended in `close`. */
  reconnects: Record<Reconnect, number> & { closed: number };
  /** Milliseconds of each successful execution (blocking request; streamed create + stream). */
  latenciesMs: number[];
}

/** An address or system error code, which an error message must not show. */
const leak = /\d{1,3}(\.\d{1,3}){3}|\bE[A-Z]{4,}\b/;

/** The body is pies' error shape `{error, status, code, message}` with the response's status. */
function piesShape(status: number, body: unknown): body is { code: string; message: string } {
  const b = body as Record<string, unknown> | null;
  return (
    !!b &&
    typeof b.error === "string" &&
    b.status === status &&
    typeof b.code === "string" &&
    typeof b.message === "string"
  );
}

/**
 * A bounded load of concurrent clients executing blocking and streamed runs, each classifying
 * every answer: the fault suite and `npm run soak` assert and print from its report.
 */
export class Load {
  private stopping = false;
  private readonly clients: Promise<void>[] = [];
  private readonly report: LoadReport = {
    requests: 0,
    succeeded: 0,
    expectedErrors: {},
    unexpectedErrors: {},
    examples: {},
    completedRunIds: [],
    runIds: [],
    streams: { opened: 0, closed: 0, errored: 0, cutWhileGatewayDown: 0, cut: 0 },
    reconnects: { resume: 0, replay: 0, drop: 0, closed: 0 },
    latenciesMs: [],
  };
  /** Streamed runs started, and of them those that reconnect (for choosing the next). */
  private streamedRuns = 0;
  private reconnecting = 0;

  constructor(private readonly options: LoadOptions) {}

  start(): this {
    for (let i = 0; i < this.options.clients; i++) {
      this.clients.push(this.loop(i % 2 === 0 ? "blocking" : "streamed"));
    }
    return this;
  }

  /** Lets every client finish its current execution, then reports. */
  async stop(): Promise<LoadReport> {
    this.stopping = true;
    await Promise.all(this.clients);
    return this.report;
  }

  /** A copy of the report so far. */
  snapshot(): LoadReport {
    return structuredClone(this.report);
  }

  private async loop(kind: "blocking" | "streamed") {
    const execute = kind === "blocking" ? this.blocking : this.streamed;
    while (!this.stopping) {
      const started = performance.now();
      // The operation's latency when it succeeded, undefined when it failed.
      const latencyMs = await execute();
      this.options.onOperation?.({
        kind,
        ok: latencyMs !== undefined,
        latencyMs: latencyMs ?? performance.now() - started,
        endedAt: Date.now(),
      });
      // After a failure a client pauses, as a real one would, rather than spin on a refusal.
      if (latencyMs === undefined) await new Promise((r) => setTimeout(r, 50));
    }
  }

  private count(kind: string, expected: boolean, example?: string) {
    const into = expected ? this.report.expectedErrors : this.report.unexpectedErrors;
    into[kind] = (into[kind] ?? 0) + 1;
    if (!expected && example && !this.report.examples[kind]) this.report.examples[kind] = example;
  }

  private async request(
    path: string,
    body?: unknown,
    extra: { headers?: Record<string, string>; signal?: AbortSignal } = {},
  ): Promise<Response | undefined> {
    const wasDown = this.options.gatewayDown?.() ?? false;
    this.report.requests++;
    const timeout = AbortSignal.timeout(this.options.requestTimeoutMs ?? 30_000);
    try {
      return await fetch(`${this.options.gatewayUrl}/api/v1${path}`, {
        method: body === undefined ? "GET" : "POST",
        headers: {
          authorization: `Bearer ${this.options.key}`,
          "content-type": "application/json",
          ...extra.headers,
        },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: extra.signal ? AbortSignal.any([timeout, extra.signal]) : timeout,
      });
    } catch (err) {
      const down = wasDown || (this.options.gatewayDown?.() ?? false);
      const name = (err as Error).name === "TimeoutError" ? "timeout" : "connection error";
      this.count(
        down ? `${name} (gateway killed)` : name,
        down,
        String((err as Error).cause ?? err),
      );
      return undefined;
    }
  }

  /** Classifies a non-2xx answer. */
  private async failed(response: Response): Promise<undefined> {
    const text = await response.text().catch(() => "");
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      body = undefined;
    }
    const { status } = response;
    if (!piesShape(status, body)) {
      this.count(`${status} not in pies' shape`, false, text.slice(0, 200));
    } else if (leak.test(body.message)) {
      this.count(`${status} showing an address`, false, body.message);
    } else if (status === 503 || status === 502 || status === 504) {
      this.count(`${status} ${body.code}`, true);
    } else {
      this.count(`${status} ${body.code}`, false, body.message);
    }
    return undefined;
  }

  /** One blocking execution; its latency when it succeeded. */
  private readonly blocking = async (): Promise<number | undefined> => {
    const started = performance.now();
    const response = await this.request(
      `/interactions/${this.options.blockingInteraction}/execute`,
      { data: {} },
    );
    if (!response) return undefined;
    if (!response.ok) return this.failed(response);
    const run = (await response.json()) as { id: string; status: string };
    const latencyMs = performance.now() - started;
    this.report.succeeded++;
    this.report.runIds.push(run.id);
    if (run.status === "completed") this.report.completedRunIds.push(run.id);
    this.report.latenciesMs.push(latencyMs);
    return latencyMs;
  };

  /** The next streamed run's reconnect, if it is one of the reconnectShare. */
  private nextReconnect(): Reconnect | undefined {
    const share = this.options.reconnectShare ?? 0;
    if (share <= 0) return undefined;
    const every = Math.max(1, Math.round(1 / share));
    if (this.streamedRuns++ % every !== 0) return undefined;
    return RECONNECTS[this.reconnecting++ % RECONNECTS.length];
  }

  /**
   * Reads a run's stream (GET /runs/:id/stream, after `lastEventId` when given) to its end; with
   * `dropAfterFirst`, drops the connection once the first event with an id has come, as a client
   * whose network fails does. Undefined when the request or the stream failed (counted).
   */
  private async readStream(
    id: string,
    lastEventId?: string,
    dropAfterFirst = false,
  ): Promise<{ events: SseEvent[]; dropped: boolean } | undefined> {
    const drop = new AbortController();
    const stream = await this.request(`/runs/${id}/stream`, undefined, {
      headers: lastEventId !== undefined ? { "last-event-id": lastEventId } : {},
      signal: drop.signal,
    });
    if (!stream) return undefined;
    if (!stream.ok) return this.failed(stream);
    this.report.streams.opened++;
    const events: SseEvent[] = [];
    try {
      await readSseIncrementally(stream.body!, (event) => {
        events.push(event);
        if (dropAfterFirst && event.id !== undefined) drop.abort();
      });
    } catch (err) {
      if (drop.signal.aborted) return { events, dropped: true };
      if (this.options.gatewayDown?.()) {
        this.report.streams.cutWhileGatewayDown++;
        this.count("stream cut (gateway killed)", true);
      } else {
        this.report.streams.cut++;
        this.count("stream cut", false, `run ${id}: ${String((err as Error).cause ?? err)}`);
      }
      return undefined;
    }
    if (events.at(-1)?.event === "error" && this.options.errorEventsExpected) {
      this.report.streams.errored++;
      this.count("stream ended with an error event", true);
      return undefined;
    }
    if (events.at(-1)?.event !== "close") {
      this.report.streams.cut++;
      const last = events.at(-1);
      this.count(
        "stream ended without close",
        false,
        `run ${id}: last ${last?.event ?? "nothing"} ${last?.data ?? ""}`,
      );
      return undefined;
    }
    this.report.streams.closed++;
    return { events, dropped: false };
  }

  /**
   * Checks what a stream opened again after `lastEventId` delivered: every message after it, in
   * order, none before it, then `close` (`original`: the messages of the whole run). Counts a
   * mismatch as an unexpected error.
   */
  private sameAsOriginal(
    id: string,
    how: Reconnect,
    original: SseEvent[],
    again: SseEvent[],
    lastEventId?: string,
  ): boolean {
    const after = lastEventId === undefined ? -Infinity : Number(lastEventId);
    const ids = (events: SseEvent[]) =>
      events.filter((e) => e.event === "message").map((e) => e.id ?? "");
    const expected = ids(original).filter((e) => Number(e) > after);
    const got = ids(again);
    if (got.join() === expected.join()) return true;
    this.count(
      `reconnect (${how}) delivered other events`,
      false,
      `run ${id} after ${lastEventId ?? "nothing"}: expected ids [${expected}], got [${got}]`,
    );
    return false;
  }

  /** One streamed run read to `close`, reconnecting when chosen; its create-to-close latency. */
  private readonly streamed = async (): Promise<number | undefined> => {
    const started = performance.now();
    const reconnect = this.nextReconnect();
    const created = await this.request("/runs", {
      interaction: this.options.streamedInteraction,
      stream: true,
      data: {},
    });
    if (!created) return undefined;
    if (!created.ok) return this.failed(created);
    const { id } = (await created.json()) as { id: string };
    this.report.runIds.push(id);
    const first = await this.readStream(id, undefined, reconnect === "drop");
    if (!first) return undefined;
    let events = first.events;
    if (first.dropped) {
      // The connection dropped mid-stream: open it again after the last event received.
      this.report.reconnects.drop++;
      const lastEventId = events.findLast((e) => e.id !== undefined)?.id;
      const rest = await this.readStream(id, lastEventId);
      if (!rest) return undefined;
      events = [...events, ...rest.events];
      // Each event once, in order: the reconnect resumed where the drop cut the stream.
      const ids = events.filter((e) => e.event === "message").map((e) => Number(e.id));
      if (ids.some((n, i) => i > 0 && !(n > ids[i - 1]!))) {
        this.count(
          "reconnect (drop) delivered other events",
          false,
          `run ${id} after ${lastEventId}: message ids [${ids}]`,
        );
        return undefined;
      }
      this.report.reconnects.closed++;
    }
    const latencyMs = performance.now() - started;
    const close = events.at(-1)!;
    this.report.succeeded++;
    const run = JSON.parse(close.data) as { status: string };
    if (run.status === "completed") this.report.completedRunIds.push(id);
    this.report.latenciesMs.push(latencyMs);
    if (reconnect === "resume" || reconnect === "replay") await this.reopen(id, reconnect, events);
    return latencyMs;
  };

  /** A run's stream opened again after its `close`, as a client that reconnects late does. */
  private async reopen(id: string, how: "resume" | "replay", original: SseEvent[]) {
    const started = performance.now();
    this.report.reconnects[how]++;
    const messages = original.filter((e) => e.event === "message" && e.id !== undefined);
    const lastEventId =
      how === "resume" ? messages[Math.floor(messages.length / 2)]?.id : undefined;
    const again = await this.readStream(id, lastEventId);
    const ok = !!again && this.sameAsOriginal(id, how, original, again.events, lastEventId);
    if (ok) this.report.reconnects.closed++;
    this.options.onOperation?.({
      kind: "reopen",
      ok,
      latencyMs: performance.now() - started,
      endedAt: Date.now(),
    });
  }
}

/** What the runs store holds after a load. */
export interface RunsCheck {
  byStatus: Record<string, number>;
  /** Runs still created or processing. */
  stuck: number;
  /** Runs answered as completed that the store does not hold as completed, with their state. */
  lost: { id: string; status: string | null; error: unknown }[];
}

/** Reads the runs store directly (runs.runs), to compare with what clients were answered. */
export async function checkRuns(
  databaseUrl: string,
  completedRunIds: string[],
): Promise<RunsCheck> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const counts = await client.query<{ status: string; n: number }>(
      "select status, count(*)::int as n from runs.runs group by status",
    );
    const byStatus = Object.fromEntries(counts.rows.map((r) => [r.status, r.n]));
    const recorded = await client.query<{ id: string; status: string; error: unknown }>(
      "select id, status, error from runs.runs where id = any($1::text[])",
      [completedRunIds],
    );
    const found = new Map(recorded.rows.map((r) => [r.id, r]));
    const lost = completedRunIds
      .map((id) => found.get(id) ?? { id, status: null, error: null })
      .filter((r) => r.status !== "completed");
    return {
      byStatus,
      stuck: (byStatus.created ?? 0) + (byStatus.processing ?? 0),
      lost,
    };
  } finally {
    await client.end();
  }
}
