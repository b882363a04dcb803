import { useEffect, useState } from "react";
import type { Run } from "../api/client";
import { readRunStream } from "../api/run-stream";

export interface RunStream {
  /** The chunks so far, joined. */
  text: string;
  /** The run as the stream's `close` event carries it. */
  final?: Run;
  error?: string;
  live: boolean;
}

/**
 * A running run's chunks, live from `GET /api/v1/runs/:id/stream` (SSE). EventSource cannot send
 * an Authorization header, so the stream is read with fetch; a stream opened late replays what
 * was sent before, then goes on.
 */
export function useRunStream(id: string, enabled: boolean): RunStream {
  const [state, setState] = useState<RunStream>({ text: "", live: false });
  useEffect(() => {
    if (!enabled) return;
    const abort = new AbortController();
    setState({ text: "", live: true });
    const onEvent = (event: string, data: string) => {
      if (event === "message") {
        const chunk = JSON.parse(data) as unknown;
        setState((s) => ({
          ...s,
          text: s.text + (typeof chunk === "string" ? chunk : JSON.stringify(chunk)),
        }));
      } else if (event === "close") {
        setState((s) => ({ ...s, final: JSON.parse(data) as Run, live: false }));
      } else if (event === "error") {
        const error = JSON.parse(data) as { message?: string };
        setState((s) => ({ ...s, error: error.message ?? data, live: false }));
      }
    };
    readRunStream(id, ({ event, data }) => onEvent(event, data), abort.signal).then(
      () => setState((s) => ({ ...s, live: false })),
      (err: unknown) => {
        if (!abort.signal.aborted) setState((s) => ({ ...s, error: String(err), live: false }));
      },
    );
    return () => abort.abort();
  }, [id, enabled]);
  return state;
}
