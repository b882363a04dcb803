import { spawn, type ChildProcess } from "node:child_process";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { freePort } from "./processes.js";
import { untilListening } from "./servers.js";

/** One node of a test's NATS cluster. */
export interface NatsClusterNode {
  /** Its server name (`-n`), as JetStream names a stream's leader and replicas. */
  name: string;
  url: string;
  monitorUrl: string;
  running(): boolean;
  /** Stops the node (SIGKILL by default: as abrupt as a lost machine). */
  kill(signal?: NodeJS.Signals): Promise<void>;
}

/** A JetStream cluster of nats-server processes on loopback, of a test's own. */
export interface NatsCluster {
  nodes: NatsClusterNode[];
  /** NATS_URL naming every node, comma-separated. */
  url: string;
  /** NATS_URL, PIES_NATS_STREAM, PIES_NATS_SUBJECT_PREFIX for pies processes. */
  env: Record<string, string>;
  /** The node that leads JetStream's meta group as `node` sees it (by its monitoring endpoint). */
  metaLeader(node?: NatsClusterNode): Promise<string | undefined>;
  /** Kills every node and removes their stores, also after a failure. */
  stop(): Promise<void>;
}

/** What a node's `/jsz` says of JetStream's meta group. */
interface Jsz {
  meta_cluster?: { leader?: string; cluster_size?: number };
}

/**
 * Starts `size` nats-server processes (`-js`, a store directory each, a server name each) routed
 * to each other as one cluster, and resolves once every node sees a JetStream meta leader of a
 * group of `size`: until then JetStream answers no stream request.
 */
export async function startNatsCluster(size = 3, timeoutMs = 60_000): Promise<NatsCluster> {
  const dir = await mkdtemp(path.join(tmpdir(), "pies-nats-cluster-"));
  const children: ChildProcess[] = [];
  const stop = async () => {
    await Promise.all(
      children.map(async (child) => {
        if (child.exitCode !== null || child.signalCode !== null) return;
        const exited = new Promise((resolve) => child.once("exit", resolve));
        child.kill("SIGKILL");
        await exited;
      }),
    );
    await rm(dir, { recursive: true, force: true });
  };
  try {
    // One after the other: ports asked for at once could be handed out twice.
    const ports: { client: number; route: number; monitor: number }[] = [];
    for (let i = 0; i < size; i++) {
      ports.push({ client: await freePort(), route: await freePort(), monitor: await freePort() });
    }
    const routes = ports.map((p) => `nats://127.0.0.1:${p.route}`);
    const nodes: NatsClusterNode[] = [];
    for (const [i, p] of ports.entries()) {
      const name = `node${i + 1}`;
      const store = path.join(dir, name);
      await mkdir(store);
      const child = spawn(
        process.env.PIES_TEST_NATS_SERVER ?? "nats-server",
        [
          ["-js", "-sd", store, "-n", name, "-a", "127.0.0.1"],
          ["-p", String(p.client), "-m", String(p.monitor)],
          ["--cluster_name", "pies-test", "--cluster", routes[i]!],
          ["--routes", routes.filter((_, j) => j !== i).join(",")],
        ].flat(),
        { stdio: "ignore" },
      );
      child.once("error", () => {});
      children.push(child);
      const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
      nodes.push({
        name,
        url: `nats://127.0.0.1:${p.client}`,
        monitorUrl: `http://127.0.0.1:${p.monitor}`,
        running: () => child.exitCode === null && child.signalCode === null,
        async kill(signal = "SIGKILL") {
          if (child.exitCode !== null || child.signalCode !== null) return;
          child.kill(signal);
          await exited;
        },
      });
    }
    await Promise.all(nodes.map((n, i) => untilListening(ports[i]!.client, children[i]!)));
    const metaLeader = async (node = nodes.find((n) => n.running())) => {
      if (!node) return undefined;
      const jsz = await fetch(`${node.monitorUrl}/jsz`).then(
        (r) => r.json() as Promise<Jsz>,
        () => undefined,
      );
      return jsz?.meta_cluster?.cluster_size === size ? jsz.meta_cluster.leader : undefined;
    };
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const leaders = await Promise.all(nodes.map((n) => metaLeader(n)));
      if (leaders[0] && leaders.every((l) => l === leaders[0])) break;
      if (Date.now() > deadline) {
        throw new Error(`no JetStream meta leader within ${timeoutMs} ms: ${leaders.join(", ")}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    const url = nodes.map((n) => n.url).join(",");
    return {
      nodes,
      url,
      env: { NATS_URL: url, PIES_NATS_STREAM: "PIES_RUNS", PIES_NATS_SUBJECT_PREFIX: "pies" },
      metaLeader,
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}
