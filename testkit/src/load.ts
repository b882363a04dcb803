import { performance } from "node:perf_hooks";
import pg from "pg";
import { parseSse } from "./sse.js";

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
}

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
  streams: { opened: number; closed: number; cutWhileGatewayDown: number; cut: number };
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
    streams: { opened: 0, closed: 0, cutWhileGatewayDown: 0, cut: 0 },
    latenciesMs: [],
  };

  constructor(private readonly options: LoadOptions) {}

  start(): this {
    for (let i = 0; i < this.options.clients; i++) {
      this.clients.push(this.loop(i % 2 === 0 ? () => this.blocking() : () => this.streamed()));
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

  private async loop(execute: () => Promise<void>) {
    while (!this.stopping) {
      const before = this.report.succeeded;
      await execute();
      // After a failure a client pauses, as a real one would, rather than spin on a refusal.
      if (this.report.succeeded === before) await new Promise((r) => setTimeout(r, 50));
    }
  }

  private count(kind: string, expected: boolean, example?: string) {
    const into = expected ? this.report.expectedErrors : this.report.unexpectedErrors;
    into[kind] = (into[kind] ?? 0) + 1;
    if (!expected && example && !this.report.examples[kind]) this.report.examples[kind] = example;
  }

  private async request(path: string, body?: unknown): Promise<Response | undefined> {
    const wasDown = this.options.gatewayDown?.() ?? false;
    this.report.requests++;
    try {
      return await fetch(`${this.options.gatewayUrl}/api/v1${path}`, {
        method: body === undefined ? "GET" : "POST",
        headers: {
          authorization: `Bearer ${this.options.key}`,
          "content-type": "application/json",
        },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(this.options.requestTimeoutMs ?? 30_000),
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
  private async failed(response: Response) {
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
  }

  private async blocking() {
    const started = performance.now();
    const response = await this.request(
      `/interactions/${this.options.blockingInteraction}/execute`,
      {
        data: {},
      },
    );
    if (!response) return;
    if (!response.ok) return this.failed(response);
    const run = (await response.json()) as { id: string; status: string };
    this.report.succeeded++;
    this.report.runIds.push(run.id);
    if (run.status === "completed") this.report.completedRunIds.push(run.id);
    this.report.latenciesMs.push(performance.now() - started);
  }

  private async streamed() {
    const started = performance.now();
    const created = await this.request("/runs", {
      interaction: this.options.streamedInteraction,
      stream: true,
      data: {},
    });
    if (!created) return;
    if (!created.ok) return this.failed(created);
    const { id } = (await created.json()) as { id: string };
    this.report.runIds.push(id);
    const stream = await this.request(`/runs/${id}/stream`);
    if (!stream) return;
    if (!stream.ok) return this.failed(stream);
    this.report.streams.opened++;
    let text: string;
    try {
      text = await stream.text();
    } catch (err) {
      text = "";
      if (this.options.gatewayDown?.()) {
        this.report.streams.cutWhileGatewayDown++;
        this.count("stream cut (gateway killed)", true);
      } else {
        this.report.streams.cut++;
        this.count("stream cut", false, `run ${id}: ${String((err as Error).cause ?? err)}`);
      }
      return;
    }
    const events = parseSse(text);
    const close = events.at(-1)?.event === "close" ? events.at(-1) : undefined;
    if (!close) {
      this.report.streams.cut++;
      const last = events.at(-1);
      this.count(
        "stream ended without close",
        false,
        `run ${id}: last ${last?.event ?? "nothing"} ${last?.data ?? ""}`,
      );
      return;
    }
    this.report.streams.closed++;
    this.report.succeeded++;
    const run = JSON.parse(close.data) as { status: string };
    if (run.status === "completed") this.report.completedRunIds.push(id);
    this.report.latenciesMs.push(performance.now() - started);
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
