import type { ConnectRouter } from "@connectrpc/connect";
import { ActiveRuns } from "./active-runs.js";
import type { ExecutorDeps } from "./context.js";
import { executorRoutes } from "./service.js";

/** The executor at work: its routes, the runs it executes and their heartbeats. */
export interface ExecutorWork {
  /** The Connect routes, to serve on a port (the executor process) or in memory (embedded). */
  routes: (router: ConnectRouter) => void;
  /**
   * Lets the runs in flight end (at most `graceMs`), then stops the heartbeats and closes the
   * provider connections. Serving has stopped before: no run starts meanwhile.
   */
  stop(graceMs: number): Promise<void>;
}

/**
 * Starts the executor's work over its deps: the ids of the runs in flight go to the runs service
 * as heartbeats every `heartbeatSeconds` (PIES_RUN_HEARTBEAT_SECONDS), so that the sweeper tells
 * a dead executor's runs from slow ones. The same wiring for the process and the embedded mode.
 */
export function startExecutorWork(deps: ExecutorDeps, heartbeatSeconds: number): ExecutorWork {
  const active = new ActiveRuns();
  const heartbeat = active.startHeartbeat(
    (runIds) => deps.runs.heartbeatRuns({ runIds }),
    heartbeatSeconds * 1000,
    deps.logger,
  );
  return {
    routes: executorRoutes(deps, active),
    async stop(graceMs) {
      await active.settle(graceMs);
      heartbeat.stop();
      await deps.providers.close();
    },
  };
}
