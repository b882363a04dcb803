import { Code, ConnectError } from "@connectrpc/connect";

/** Node system error codes of a connection that could not be made or was lost. */
const connectionCodes = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ECONNABORTED",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENOTFOUND",
  "EAI_AGAIN",
  "ERR_HTTP2_GOAWAY_SESSION",
  "ERR_HTTP2_INVALID_SESSION",
  "ERR_HTTP2_SESSION_ERROR",
  "ERR_HTTP2_STREAM_CANCEL",
  "ERR_HTTP2_STREAM_ERROR",
  "ERR_HTTP2_INVALID_STREAM",
  "ERR_STREAM_DESTROYED",
]);

/**
 * SQLSTATEs of a PostgreSQL server that is going away or not there yet: 08xxx connection
 * exceptions, 57P01 admin shutdown, 57P02 crash shutdown, 57P03 cannot connect now (starting up or
 * in recovery), 53300 too many connections.
 */
const unavailableSqlStates = /^(08...|57P0[123]|53300)$/;

/** Messages of node-postgres for a connection it lost or could not make. */
const pgConnectionMessages =
  /^(Connection terminated|Client has encountered a connection error|timeout exceeded when trying to connect|Client was closed)/;

const causes = function* (err: unknown): Generator<unknown> {
  const seen = new Set<unknown>();
  for (let e = err; e && typeof e === "object" && !seen.has(e); e = (e as Error).cause) {
    seen.add(e);
    yield e;
  }
};

/** Whether `err` (or an error in its `cause` chain) is a lost or refused network connection. */
export function isConnectionError(err: unknown): boolean {
  for (const e of causes(err)) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string" && connectionCodes.has(code)) return true;
  }
  return false;
}

/**
 * Whether `err` means that PostgreSQL is unreachable, restarting or shutting down (as opposed to a
 * bad query): worth a 503 and a retry, not a 500.
 */
export function isDatabaseUnavailable(err: unknown): boolean {
  if (isConnectionError(err)) return true;
  for (const e of causes(err)) {
    const { code, message } = e as { code?: unknown; message?: unknown };
    if (typeof code === "string" && unavailableSqlStates.test(code)) return true;
    if (typeof message === "string" && pgConnectionMessages.test(message)) return true;
  }
  return false;
}

/** The error a service answers while its database is down (the detail stays in `cause`). */
export const databaseUnavailable = (cause: unknown) =>
  new ConnectError("the database is unavailable", Code.Unavailable, undefined, undefined, cause);

/**
 * When this process last saw its database fail (a query refused, a connection lost). The runs
 * sweeper waits a full lease after it before failing runs whose heartbeats may have been lost.
 */
export class DatabaseFaults {
  private last = 0;

  /** Records a failure now. */
  note(): void {
    this.last = Date.now();
  }

  /** Milliseconds since epoch of the last failure, 0 when none was seen. */
  get lastAt(): number {
    return this.last;
  }
}
