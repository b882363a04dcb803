import { expectJson, gatewayApi } from "./http.js";
import { startStack, type Stack } from "./processes.js";
import {
  startPrivateNats,
  startPrivatePostgres,
  type PrivateNats,
  type PrivatePostgres,
} from "./servers.js";

export interface FaultStackOptions {
  /** PIES_RUN_LEASE_SECONDS: short, so that runs of killed processes settle within the run. */
  leaseSeconds: number;
  /** PIES_RUN_TTL_SECONDS of streamed runs. */
  ttlSeconds: number;
  sseHeartbeatSeconds: number;
  /** The model of the blocking interaction: long enough that each fault finds executions in flight. */
  blockingModel: string;
  /** The edge (gateway and executor in one process) in place of the gateway and the executor. */
  edge?: boolean;
  /** A command each pies process runs under, e.g. `["taskset", "-c", "1"]` (startStack's). */
  launcher?: string[];
  /** Arguments to node for every pies process (e.g. `--trace-gc-nvp`, to see what a soak's GCs do). */
  nodeArgs?: string[];
  /** More environment for every process (e.g. the gateway's PIES_PROBE_PORT). */
  env?: Record<string, string>;
}

/** One fault: what it is called, and how to apply it (resolves once pies' side is back up). */
export interface Fault {
  name: string;
  apply(): Promise<void>;
}

/**
 * The four processes on a PostgreSQL cluster and a NATS server of their own (never the shared
 * ones), with short clocks, a blocking and a streamed interaction of the `test` provider, and the
 * faults to apply: what the fault suite asserts on and `npm run soak` reports on.
 */
export interface FaultStack {
  pg: PrivatePostgres;
  nats: PrivateNats;
  stack: Stack;
  blockingInteraction: string;
  streamedInteraction: string;
  /**
   * Restart PostgreSQL, restart NATS, then SIGKILL and restart catalog, runs, executor, gateway
   * (with `edge`: catalog, runs, edge).
   */
  faults: Fault[];
  /** Whether the gateway is being killed now (connection errors are then expected). */
  gatewayDown(): boolean;
  /** Every process, server and directory goes, also after a failure. */
  stop(): Promise<void>;
}

export async function startFaultStack(options: FaultStackOptions): Promise<FaultStack> {
  const [pg, nats] = await Promise.all([startPrivatePostgres(), startPrivateNats()]);
  let stack: Stack | undefined;
  const stop = async () => {
    await stack?.stop().catch(() => {});
    await Promise.all([nats.stop(), pg.stop()]);
  };
  try {
    stack = await startStack({
      databaseUrl: pg.url,
      natsEnv: nats.env,
      edge: options.edge,
      launcher: options.launcher,
      nodeArgs: options.nodeArgs,
      env: {
        PIES_RUN_HEARTBEAT_SECONDS: "1",
        PIES_RUN_LEASE_SECONDS: String(options.leaseSeconds),
        PIES_SWEEP_INTERVAL_SECONDS: "1",
        PIES_SSE_HEARTBEAT_SECONDS: String(options.sseHeartbeatSeconds),
        PIES_RUN_TTL_SECONDS: String(options.ttlSeconds),
        ...options.env,
      },
    });
    const running = stack;
    const { blocking, streamed } = await createLoadInteractions(
      running.gatewayUrl,
      running.bootstrap.key,
      running.bootstrap.environment,
      options.blockingModel,
      () => running.output(),
    );

    let gatewayDown = false;
    const kill = (name: string): Fault => ({
      name: `kill -9 ${name}`,
      async apply() {
        gatewayDown = name === "gateway" || name === "edge";
        try {
          await running.restart(name);
        } finally {
          gatewayDown = false;
        }
      },
    });
    return {
      pg,
      nats,
      stack: running,
      blockingInteraction: blocking.id,
      streamedInteraction: streamed.id,
      faults: [
        { name: "restart PostgreSQL", apply: () => pg.restart() },
        { name: "restart NATS", apply: () => nats.restart() },
        ...(options.edge
          ? ["catalog", "runs", "edge"]
          : ["catalog", "runs", "executor", "gateway"]
        ).map(kill),
      ],
      gatewayDown: () => gatewayDown,
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}

/**
 * The interactions a Load runs, on the built-in test provider of `environment`: `blocking` of
 * `blockingModel`, `streamed` of `test-slow` (a chunk every 50 ms). Each fails loudly, with
 * `output()` (the processes' last lines) in its message.
 */
export async function createLoadInteractions(
  gatewayUrl: string,
  key: string,
  environment: string,
  blockingModel: string,
  output: () => string = () => "",
): Promise<{ blocking: { id: string }; streamed: { id: string } }> {
  const api = gatewayApi(gatewayUrl, key);
  const post = async (path: string, body: unknown) =>
    expectJson<{ id: string }>(await api(path, { body }), 201, output);
  // A text prompt: a jst template could miss its time limit on a loaded machine (a 400).
  const prompt = await post("/prompts", { name: "p", content_type: "text", content: "Say hi" });
  const interaction = (name: string, model: string) =>
    post("/interactions", {
      name,
      model,
      environment,
      prompts: [{ type: "template", template: prompt.id }],
    });
  return {
    blocking: await interaction("blocking", blockingModel),
    streamed: await interaction("streamed", "test-slow"),
  };
}
