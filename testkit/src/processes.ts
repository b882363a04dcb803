import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { createWriteStream } from "node:fs";
import { execFile } from "node:child_process";
import { createServer } from "node:net";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

/** The repository root (this file is testkit/dist/processes.js once built). */
export const repoRoot = path.resolve(fileURLToPath(import.meta.url), "../../..");

/**
 * The internal credential (PIES_INTERNAL_TOKEN) of every process this test process starts: they
 * refuse each other's calls without it. One per test process, never a constant in the code.
 */
export const internalToken = randomBytes(32).toString("base64url");

/** A port that was free a moment ago (the OS picks it). */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

export interface ManagedProcess {
  name: string;
  child: ChildProcess;
  /** The last lines the process wrote (for a failing test's message). */
  output(): string;
  /** SIGTERM, then SIGKILL after `graceMs`; resolves with the exit code. */
  stop(graceMs?: number): Promise<number | null>;
  exited: Promise<number | null>;
}

/**
 * Starts `node <script>` from the repository root with the given environment; under `launcher`
 * when given (a command and its arguments that end by running the rest, e.g. `taskset -c 1`).
 */
export function startProcess(
  name: string,
  script: string,
  env: Record<string, string>,
  nodeArgs: string[] = [],
  launcher: string[] = [],
): ManagedProcess {
  const argv = [...launcher, process.execPath, ...nodeArgs, script];
  const child = spawn(argv[0]!, argv.slice(1), {
    cwd: repoRoot,
    env: {
      PATH: process.env.PATH ?? "",
      LOG_LEVEL: "warn",
      PIES_INTERNAL_TOKEN: internalToken,
      // No rate limit unless a test asks (tests and benches send many requests with one key).
      PIES_RATE_LIMIT_PER_MINUTE: "0",
      ...env,
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const lines: string[] = [];
  // The whole output too, when the test run keeps it (scripts/run-tests.mjs scans it for keys).
  const dir = process.env.PIES_TEST_LOG_DIR;
  const file = dir
    ? createWriteStream(path.join(dir, `${name}-${child.pid ?? "x"}.log`), { flags: "a" })
    : undefined;
  file?.on("error", () => {});
  child.once("close", () => file?.end());
  const keep = (chunk: Buffer) => {
    file?.write(chunk);
    lines.push(...chunk.toString().split("\n").filter(Boolean));
    if (lines.length > 1000) lines.splice(0, lines.length - 1000);
  };
  child.stdout!.on("data", keep);
  child.stderr!.on("data", keep);
  const exited = new Promise<number | null>((resolve) =>
    child.once("exit", (code) => resolve(code)),
  );
  return {
    name,
    child,
    exited,
    output: () => lines.map((l) => `[${name}] ${l}`).join("\n"),
    async stop(graceMs = 10_000) {
      if (child.exitCode !== null || child.signalCode !== null) return child.exitCode;
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), graceMs);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
}

export interface StackOptions {
  databaseUrl: string;
  /** NATS_URL, PIES_NATS_STREAM, PIES_NATS_SUBJECT_PREFIX. */
  natsEnv: Record<string, string>;
  env?: Record<string, string>;
  /**
   * Run the gateway and an executor as one process (`embedded/dist/edge-main.js`, named `edge`)
   * instead of two: catalog, runs and edge.
   */
  edge?: boolean;
  /**
   * More environment for some processes by name (after `env`), e.g. `{ executor: {
   * PIES_METRICS_PORT } }` for a setting two processes read but must not share.
   */
  processEnv?: Partial<
    Record<"catalog" | "runs" | "executor" | "gateway" | "edge", Record<string, string>>
  >;
  /** Extra arguments to node for every process, e.g. `--cpu-prof` when profiling. */
  nodeArgs?: string[];
  /** Extra arguments to node for some processes by name (after `nodeArgs`), e.g. `{ executor: [...] }`. */
  processNodeArgs?: Partial<Record<"catalog" | "runs" | "executor" | "gateway" | "edge", string[]>>;
  /** A command each process runs under, e.g. `["taskset", "-c", "1"]` to pin them to one CPU. */
  launcher?: string[];
  /**
   * Where the built processes are (default: this repository): another tree laid out the same way,
   * e.g. the production install that the image holds (scripts/image-tree.mjs).
   */
  root?: string;
}

export interface Stack {
  gatewayUrl: string;
  catalogUrl: string;
  runsUrl: string;
  /** The executor's address ("" with `edge`: the executor is inside the edge). */
  executorUrl: string;
  /** The processes running now (a restarted one replaces its predecessor). */
  processes: ManagedProcess[];
  /** Project, test environment and API key made with the CLI. */
  bootstrap: { account: string; project: string; environment: string; key: string };
  output(): string;
  /**
   * Kills a process (SIGKILL by default, as a node failure would) and starts it again with the same
   * port and settings; resolves once the gateway reports ready again.
   */
  restart(name: string, signal?: NodeJS.Signals): Promise<void>;
  /** Kills a process (SIGKILL by default) and leaves it down until `start`. */
  kill(name: string, signal?: NodeJS.Signals): Promise<void>;
  /** Starts a killed process again, same port and settings; resolves once the gateway is ready. */
  start(name: string): Promise<void>;
  /** Processes that exited without being stopped or restarted by the test, with their code. */
  unexpectedExits(): { name: string; code: number | null; signal: string | null }[];
  /** SIGTERM to each process, front to back; resolves with their exit codes by name. */
  stop(): Promise<Record<string, number | null>>;
}

/**
 * pies as Kubernetes runs it: catalog, runs, executor and gateway as four OS processes talking
 * Connect over HTTP/2, with real PostgreSQL and NATS. Resolves when the gateway reports ready.
 */
export async function startStack(options: StackOptions): Promise<Stack> {
  const [catalogPort, runsPort, executorPort, gatewayPort] = await Promise.all(
    [0, 1, 2, 3].map(() => freePort()),
  );
  const secretKey = Buffer.alloc(32, 7).toString("base64");
  const catalogUrl = `http://127.0.0.1:${catalogPort}`;
  const runsUrl = `http://127.0.0.1:${runsPort}`;
  const executorUrl = `http://127.0.0.1:${executorPort}`;
  const gatewayUrl = `http://127.0.0.1:${gatewayPort}`;
  const common = { HOST: "127.0.0.1", ...options.env };
  // What the executor, gateway and edge share: NATS and the two services they call.
  const peers = { ...common, ...options.natsEnv, CATALOG_URL: catalogUrl, RUNS_URL: runsUrl };
  const specs: {
    name: "catalog" | "runs" | "executor" | "gateway" | "edge";
    script: string;
    env: Record<string, string>;
  }[] = [
    {
      name: "catalog",
      script: "services/catalog/dist/main.js",
      env: {
        ...common,
        // Its change events go to NATS.
        ...options.natsEnv,
        PORT: String(catalogPort),
        DATABASE_URL: options.databaseUrl,
        PIES_SECRET_KEY: secretKey,
      },
    },
    {
      name: "runs",
      script: "services/runs/dist/main.js",
      env: {
        ...common,
        ...options.natsEnv,
        PORT: String(runsPort),
        DATABASE_URL: options.databaseUrl,
        // Asked for the projects' retention.
        CATALOG_URL: catalogUrl,
        // Experiments replay through it (the edge serves it on this port too).
        EXECUTOR_URL: executorUrl,
      },
    },
    ...(options.edge
      ? [
          {
            name: "edge" as const,
            script: "embedded/dist/edge-main.js",
            env: { ...peers, PORT: String(gatewayPort), PIES_EXECUTOR_PORT: String(executorPort) },
          },
        ]
      : []),
  ];
  if (!options.edge)
    specs.push(
      {
        name: "executor",
        script: "services/executor/dist/main.js",
        env: { ...peers, PORT: String(executorPort) },
      },
      {
        name: "gateway",
        script: "gateway/dist/main.js",
        env: { ...peers, PORT: String(gatewayPort), EXECUTOR_URL: executorUrl },
      },
    );
  const launched: ManagedProcess[] = [];
  const intended = new WeakSet<ManagedProcess>();
  const unexpected: { name: string; code: number | null; signal: string | null }[] = [];
  const launch = (spec: (typeof specs)[number]) => {
    const nodeArgs = [...(options.nodeArgs ?? []), ...(options.processNodeArgs?.[spec.name] ?? [])];
    const script = path.resolve(options.root ?? repoRoot, spec.script);
    const env = { ...spec.env, ...options.processEnv?.[spec.name] };
    const managed = startProcess(spec.name, script, env, nodeArgs, options.launcher);
    launched.push(managed);
    void managed.exited.then((code) => {
      if (!intended.has(managed)) {
        unexpected.push({ name: spec.name, code, signal: managed.child.signalCode });
      }
    });
    return managed;
  };
  const processes = specs.map(launch);
  const output = () => launched.map((p) => p.output()).join("\n");
  const stop = async () => {
    const codes: Record<string, number | null> = {};
    // Front to back, as a rollout would drain them.
    for (const p of [...processes].reverse()) {
      intended.add(p);
      codes[p.name] = await p.stop();
    }
    return codes;
  };
  const indexOf = (name: string) => {
    const index = processes.findIndex((p) => p.name === name);
    if (index < 0) throw new Error(`no process ${name}`);
    return index;
  };
  const kill = async (name: string, signal: NodeJS.Signals = "SIGKILL") => {
    const old = processes[indexOf(name)]!;
    intended.add(old);
    if (old.child.exitCode === null && old.child.signalCode === null) old.child.kill(signal);
    await old.exited;
  };
  const start = async (name: string) => {
    const index = indexOf(name);
    processes[index] = launch(specs[index]!);
    await waitUntilReady(`${gatewayUrl}/readyz`, processes, 30_000);
  };
  const restart = async (name: string, signal: NodeJS.Signals = "SIGKILL") => {
    await kill(name, signal);
    await start(name);
  };
  try {
    await waitUntilReady(`${gatewayUrl}/readyz`, processes, 30_000);
    const { stdout } = await promisify(execFile)(
      process.execPath,
      [
        path.resolve(options.root ?? repoRoot, "services/catalog/dist/cli.js"),
        "bootstrap",
        "--name",
        "e2e",
      ],
      {
        cwd: options.root ?? repoRoot,
        env: { PATH: process.env.PATH ?? "", DATABASE_URL: options.databaseUrl },
      },
    );
    return {
      gatewayUrl,
      catalogUrl,
      runsUrl,
      executorUrl: options.edge ? "" : executorUrl,
      processes,
      bootstrap: JSON.parse(stdout),
      output,
      restart,
      kill,
      start,
      unexpectedExits: () => [...unexpected],
      stop,
    };
  } catch (err) {
    await stop();
    throw new Error(`the stack did not start: ${(err as Error).message}\n${output()}`);
  }
}

async function waitUntilReady(url: string, processes: ManagedProcess[], timeoutMs: number) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const dead = processes.find((p) => p.child.exitCode !== null);
    if (dead) throw new Error(`${dead.name} exited with code ${dead.child.exitCode}`);
    const ready = await fetch(url).then(
      (r) => r.ok,
      () => false,
    );
    if (ready) return;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`${url} not ready within ${timeoutMs} ms`);
}
