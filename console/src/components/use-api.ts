import { useEffect, useState, type DependencyList } from "react";
import { errorMessage } from "../api/client";

export interface Loaded<T> {
  data?: T;
  error?: string;
  /** The HTTP status of the failure (404: gone), when the API answered one. */
  status?: number;
  loading: boolean;
}

/**
 * Loads with an openapi-fetch call (none when `load` is undefined) each time `deps` change; the previous data stays shown while
 * the next loads, and an answer that arrives after a newer request started is dropped.
 */
export function useApi<T>(
  load: (() => Promise<{ data?: T; error?: unknown; response: Response }>) | undefined,
  deps: DependencyList,
): Loaded<T> & { reload: () => void } {
  const [state, setState] = useState<Loaded<T>>({ loading: load !== undefined });
  const [tick, setTick] = useState(0);
  useEffect(() => {
    // Nothing to load (yet): no request.
    if (!load) {
      setState({ loading: false });
      return;
    }
    let current = true;
    setState((previous) => ({ ...previous, loading: true }));
    load().then(
      ({ data, error, response }) => {
        if (!current) return;
        if (data !== undefined) setState({ data, loading: false });
        else setState({ error: errorMessage(error), status: response.status, loading: false });
      },
      (err: unknown) => current && setState({ error: errorMessage(err), loading: false }),
    );
    return () => {
      current = false;
    };
  }, [...deps, tick]);
  return { ...state, reload: () => setTick((n) => n + 1) };
}
