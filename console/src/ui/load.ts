import { useCallback, useEffect, useState } from "react";
import { errorMessage } from "../api/client";

/** What openapi-fetch answers: the body of a 2xx, or the error body with the response. */
export interface Answer<T> {
  data?: T;
  error?: unknown;
  response: Response;
}

export type Loaded<T> =
  | { state: "loading" }
  | { state: "error"; message: string; status?: number }
  | { state: "ready"; data: T };

/** The answer's data, or an Error carrying the API's message and status. */
export function unwrap<T>(answer: Answer<T>): T {
  if (answer.data !== undefined && answer.response.ok) return answer.data;
  const error = new Error(
    answer.error !== undefined ? errorMessage(answer.error) : `HTTP ${answer.response.status}`,
  ) as Error & { status?: number; body?: unknown };
  error.status = answer.response.status;
  error.body = answer.error;
  throw error;
}

/** Loads something for a page (again on `reload()` or when `deps` change). */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[]) {
  const [loaded, setLoaded] = useState<Loaded<T>>({ state: "loading" });
  const [count, setCount] = useState(0);
  // The caller's deps decide when to load again.
  const run = useCallback(load, deps);
  useEffect(() => {
    let live = true;
    setLoaded((previous) => (previous.state === "ready" ? previous : { state: "loading" }));
    run().then(
      (data) => live && setLoaded({ state: "ready", data }),
      (err: unknown) =>
        live &&
        setLoaded({
          state: "error",
          message: errorMessage(err),
          status: (err as { status?: number }).status,
        }),
    );
    return () => {
      live = false;
    };
  }, [run, count]);
  return { loaded, reload: () => setCount((n) => n + 1), setLoaded };
}
