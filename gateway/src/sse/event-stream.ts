import type { ServerResponse } from "node:http";
import type { Logger } from "@pies/common";

/**
 * The reason a stream's signals abort with. `abort()` without one builds a DOMException (a stack
 * capture) at every call, even on a controller already aborted, and a stream's end calls it on
 * two controllers, some of them more than once: a cost paid for every streamed run.
 */
export const STREAM_ENDED = new DOMException("the stream ended", "AbortError");

/**
 * One Server-Sent Events response. Writes are dropped once the response has ended or its socket
 * is gone, `end()` may be called any number of times, and errors of the response and its socket
 * are handled here: many timers and loops may end one stream, none of them can crash the process
 * with a write after end (an unhandled `error` event).
 */
export class EventStream {
  private readonly abort = new AbortController();

  /** Aborts when the stream ends, whoever ended it (this side, the client, or a socket error). */
  readonly signal: AbortSignal = this.abort.signal;

  constructor(
    private readonly res: ServerResponse,
    logger: Logger,
    /**
     * Headers the request set before the response was taken over (Fastify's reply.getHeaders():
     * x-request-id, CORS, the run's id), which a hijacked reply would not send.
     */
    headers: Record<string, string | number | string[] | undefined> = {},
  ) {
    const onError = (err: Error) => {
      logger.debug({ err }, "event stream connection failed");
      this.end();
    };
    res.on("error", onError);
    // The socket as it is now: by the response's `close` Node has detached it (res.socket is
    // null), and a keep-alive socket outlives the response, so a listener left on it would keep
    // this response alive for as long as the connection serves requests.
    const socket = res.socket;
    socket?.on("error", onError);
    const closed = () => {
      socket?.off("error", onError);
      this.abort.abort(STREAM_ENDED);
    };
    res.once("close", closed);
    // A client that left before the stream was taken over (while its run was being started): its
    // `close` has gone by, and the stream's resources are given back now, not at the run's end.
    // After this turn: the caller adds its listeners to the signal right after construction.
    queueMicrotask(() => {
      if (res.destroyed) closed();
    });
    res.writeHead(200, {
      ...headers,
      "content-type": "text/event-stream; charset=utf-8",
      "cache-control": "no-cache, no-transform",
      connection: "keep-alive",
      "x-accel-buffering": "no",
    });
    res.flushHeaders();
  }

  /** Whether events can still be written. */
  get open(): boolean {
    return !this.signal.aborted && !this.res.writableEnded && !this.res.destroyed;
  }

  /** Writes an event; `id` is the bus sequence a reconnect resumes after (Last-Event-ID). */
  event(name: string, data: string, id?: number): void {
    this.write(format(name, data, id));
  }

  /** Writes a last event and ends the response, in one write (as `event` then `end`). */
  last(name: string, data: string, id?: number): void {
    if (this.open) this.res.end(format(name, data, id));
    this.abort.abort(STREAM_ENDED);
  }

  /** A comment line, ignored by clients: keeps proxies from timing the connection out. */
  comment(text: string): void {
    this.write(`: ${text}\n\n`);
  }

  /** Ends the response (once) and aborts everything tied to the stream. */
  end(): void {
    if (this.open) this.res.end();
    this.abort.abort(STREAM_ENDED);
  }

  private write(text: string) {
    if (this.open) this.res.write(text);
  }
}

/** An event as the stream carries it. */
function format(name: string, data: string, id?: number): string {
  return `${id !== undefined ? `id: ${id}\n` : ""}event: ${name}\ndata: ${data}\n\n`;
}
