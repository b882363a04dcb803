import { useEffect, useState } from "react";
import { readEventStream } from "../api/run-stream";
import type { ExperimentSummary } from "./model";

export interface ExperimentStream {
  /** The experiment as the latest `progress` or `end` event carried it. */
  latest?: ExperimentSummary;
  /** The `end` event came: the experiment has ended. */
  ended: boolean;
  /**
   * Why the stream could not be read (refused: a key has few streams; cut before its end): the
   * page asks for the experiment again instead.
   */
  failed?: string;
}

/**
 * A running experiment's progress, live from `GET /api/v1/experiments/:id/stream` (SSE), read as
 * the run page reads a run's stream (fetch and a reader: the token goes in the Authorization
 * header, not in the address). Each `progress` event is the experiment without its pairs; `end`
 * is the same once it has ended.
 */
export function useExperimentStream(id: string, enabled: boolean): ExperimentStream {
  const [state, setState] = useState<ExperimentStream>({ ended: false });
  useEffect(() => {
    if (!enabled) return;
    const abort = new AbortController();
    setState({ ended: false });
    let ended = false;
    readEventStream(
      `/api/v1/experiments/${encodeURIComponent(id)}/stream`,
      ({ event, data }) => {
        if (event === "progress" || event === "end") {
          ended ||= event === "end";
          const latest = JSON.parse(data) as ExperimentSummary;
          setState((s) => ({ ...s, latest, ended: s.ended || event === "end" }));
        } else if (event === "error") {
          const error = JSON.parse(data) as { message?: string };
          setState((s) => ({ ...s, failed: error.message ?? data }));
        }
      },
      abort.signal,
    ).then(
      () => {
        if (!ended && !abort.signal.aborted)
          setState((s) => ({ ...s, failed: s.failed ?? "the stream ended early" }));
      },
      (err: unknown) => {
        if (!abort.signal.aborted)
          setState((s) => ({ ...s, failed: (err as Error).message ?? String(err) }));
      },
    );
    return () => abort.abort();
  }, [id, enabled]);
  return state;
}
