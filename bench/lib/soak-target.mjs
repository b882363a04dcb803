// @ts-check
import {
  createLoadInteractions,
  expectJson,
  freePort,
  gatewayApi,
  startFaultStack,
  startPrivatePostgres,
} from "@pies/testkit";
import { startEmbedded } from "./embedded.mjs";

/** @import { Fault, PrivateNats, PrivatePostgres } from "@pies/testkit" */
/** @import { Embedded } from "./embedded.mjs" */

/**
 * What the soak runs against (see startTarget).
 * @typedef {object} SoakTarget
 * @property {string} gatewayUrl
 * @property {string} probeUrl the probe port's /readyz (PIES_PROBE_PORT)
 * @property {string} key
 * @property {string} blockingInteraction
 * @property {string} streamedInteraction
 * @property {PrivatePostgres} pg
 * @property {PrivateNats} [nats] none in the embedded mode
 * @property {{ events: string, records: string, subjectPrefix: string }} [streams] with nats
 * @property {() => { name: string, pid: number | undefined }[]} processes
 * @property {Fault[]} faults
 * @property {() => boolean} gatewayDown
 * @property {() => ExitedProcess[]} unexpectedExits
 * @property {() => Promise<void>} stop
 */

/** @typedef {{ name: string, code: number | null, signal: string | null }} ExitedProcess */

/**
 * What `npm run soak` runs against, by --mode, always on a PostgreSQL cluster of its own (and for
 * four and edge a NATS server of its own, never the shared ones):
 * - four: catalog, runs, executor and gateway as four processes;
 * - edge: catalog, runs and the edge (gateway and executor in one process);
 * - embedded: the one-process embedded mode on that PostgreSQL (DATABASE_URL, so that its runs can
 *   be checked and its tables read like the others') with its in-process event bus: no NATS.
 *
 * The gateway (or edge, or embedded process) serves Kubernetes' probes on a port of their own
 * (PIES_PROBE_PORT, as the chart deploys it), kept across restarts: `probeUrl` is its /readyz.
 *
 * Resolves to { gatewayUrl, probeUrl, key, blockingInteraction, streamedInteraction, pg, nats?, streams?,
 * processes(), faults, gatewayDown(), unexpectedExits(), stop() } where processes() names the pies
 * processes running now ([{ name, pid }]: a restart changes a pid), streams the event and record
 * streams' names, and faults the faults --faults applies in turn.
 * @param {string} mode
 * `env` adds settings to every pies process's environment (--env).
 * @param {{ leaseSeconds: number, blockingModel: string, launcher: string[], nodeArgs?: string[], env?: Record<string, string> }} options
 * @returns {Promise<SoakTarget>}
 */
export async function startTarget(
  mode,
  { leaseSeconds, blockingModel, launcher, nodeArgs, env = {} },
) {
  const clocks = {
    PIES_RUN_HEARTBEAT_SECONDS: "1",
    PIES_RUN_LEASE_SECONDS: String(leaseSeconds),
    PIES_SWEEP_INTERVAL_SECONDS: "1",
    PIES_SSE_HEARTBEAT_SECONDS: "5",
    PIES_RUN_TTL_SECONDS: String(leaseSeconds),
  };
  const probePort = await freePort();
  const probeUrl = `http://127.0.0.1:${probePort}/readyz`;
  if (mode === "four" || mode === "edge") {
    const faulty = await startFaultStack({
      env: { ...env, PIES_PROBE_PORT: String(probePort) },
      leaseSeconds,
      ttlSeconds: leaseSeconds,
      sseHeartbeatSeconds: 5,
      blockingModel,
      edge: mode === "edge",
      launcher,
      nodeArgs,
    });
    const { stack, pg, nats } = faulty;
    // startPrivateNats' env names the stream and the prefix.
    const stream = /** @type {string} */ (nats.env.PIES_NATS_STREAM);
    return {
      gatewayUrl: stack.gatewayUrl,
      probeUrl,
      key: stack.bootstrap.key,
      blockingInteraction: faulty.blockingInteraction,
      streamedInteraction: faulty.streamedInteraction,
      pg,
      nats,
      streams: {
        events: stream,
        // The run record log beside it (recordsFromConfig).
        records: `${stream}_RECORDS`,
        subjectPrefix: /** @type {string} */ (nats.env.PIES_NATS_SUBJECT_PREFIX),
      },
      processes: () => stack.processes.map((p) => ({ name: p.name, pid: p.child.pid })),
      faults: faulty.faults,
      gatewayDown: faulty.gatewayDown,
      unexpectedExits: () => stack.unexpectedExits(),
      stop: () => faulty.stop(),
    };
  }
  if (mode !== "embedded") throw new Error(`--mode must be four, edge or embedded, not ${mode}`);
  const pg = await startPrivatePostgres();
  /** @type {Embedded | undefined} */
  let embedded;
  try {
    embedded = await startEmbedded({
      launcher,
      nodeArgs,
      env: { ...env, ...clocks, DATABASE_URL: pg.url, PIES_PROBE_PORT: String(probePort) },
    });
    const gatewayUrl = embedded.url;
    const key = embedded.apiKey;
    // The seeded project's `test` environment (the built-in test provider).
    const listed = await expectJson(
      await gatewayApi(gatewayUrl, key)("/environments"),
      200,
      embedded.output,
    );
    const environment = (listed.data ?? listed.items ?? listed).find?.(
      (/** @type {{ id: string, name: string }} */ e) => e.name === "test",
    );
    if (!environment) throw new Error(`no test environment: ${JSON.stringify(listed)}`);
    const { blocking, streamed } = await createLoadInteractions(
      gatewayUrl,
      key,
      environment.id,
      blockingModel,
      embedded.output,
    );
    const running = embedded;
    /** @type {ExitedProcess[]} */
    const exits = [];
    void running.process.exited.then((code) => {
      if (!stopping)
        exits.push({ name: "embedded", code, signal: running.process.child.signalCode });
    });
    let stopping = false;
    return {
      gatewayUrl,
      probeUrl,
      key,
      blockingInteraction: blocking.id,
      streamedInteraction: streamed.id,
      pg,
      processes: () => [{ name: "embedded", pid: running.process.child.pid }],
      // A SIGKILL of the one process would need it started again on its port: not applied.
      faults: [{ name: "restart PostgreSQL", apply: () => pg.restart() }],
      gatewayDown: () => false,
      unexpectedExits: () => [...exits],
      async stop() {
        stopping = true;
        await running.stop();
        await pg.stop();
      },
    };
  } catch (err) {
    await embedded?.stop();
    await pg.stop();
    throw err;
  }
}
