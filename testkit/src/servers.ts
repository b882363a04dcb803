import { execFile, spawn, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { chmod, chown, mkdtemp, readdir, rm } from "node:fs/promises";
import { connect } from "node:net";
import { tmpdir, userInfo } from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { freePort } from "./processes.js";

const run = promisify(execFile);

/** A PostgreSQL cluster of a test's own (never the shared one), which the test may restart. */
export interface PrivatePostgres {
  /** `postgres://postgres@127.0.0.1:<port>/postgres` (trust auth). */
  url: string;
  port: number;
  /** The postmaster's pid now (from postmaster.pid; a restart changes it), undefined when down. */
  pid(): number | undefined;
  /** `pg_ctl restart -m fast`: every session is cut, the server is back when this resolves. */
  restart(): Promise<void>;
  /** `pg_ctl stop -m immediate`, then the cluster's directory is removed. */
  stop(): Promise<void>;
}

/** The newest installed server's bin directory (PIES_TEST_PG_BIN overrides). */
async function postgresBin(): Promise<string> {
  if (process.env.PIES_TEST_PG_BIN) return process.env.PIES_TEST_PG_BIN;
  const root = "/usr/lib/postgresql";
  const versions = (await readdir(root).catch(() => [] as string[]))
    .filter((v) => /^\d+$/.test(v))
    .sort((a, b) => Number(b) - Number(a));
  if (!versions[0]) throw new Error(`no PostgreSQL server under ${root} (set PIES_TEST_PG_BIN)`);
  return path.join(root, versions[0], "bin");
}

/**
 * initdb and pg_ctl refuse to run as root: as root they run as the `postgres` user (runuser),
 * in a directory it owns.
 */
async function asServerUser(dir: string): Promise<(cmd: string, args: string[]) => string[]> {
  if (userInfo().uid !== 0) return (cmd, args) => [cmd, ...args];
  const [{ stdout: uid }, { stdout: gid }] = await Promise.all([
    run("id", ["-u", "postgres"]),
    run("id", ["-g", "postgres"]),
  ]);
  await chown(dir, Number(uid), Number(gid));
  return (cmd, args) => ["runuser", "-u", "postgres", "--", cmd, ...args];
}

/**
 * Starts a throwaway PostgreSQL cluster with `initdb`/`pg_ctl` of the installed server: data in a
 * temporary directory, TCP on a free loopback port, its unix socket in that directory, trust auth,
 * fsync off.
 */
export async function startPrivatePostgres(): Promise<PrivatePostgres> {
  const bin = await postgresBin();
  const dir = await mkdtemp(path.join(tmpdir(), "pies-pg-"));
  await chmod(dir, 0o700);
  const port = await freePort();
  const data = path.join(dir, "data");
  const as = await asServerUser(dir);
  const exec = async (cmd: string, args: string[]) => {
    const [file, ...rest] = as(path.join(bin, cmd), args);
    await run(file!, rest, { cwd: dir });
  };
  const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200`;
  const log = path.join(dir, "log");
  try {
    await exec("initdb", ["-D", data, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"]);
    await exec("pg_ctl", ["-D", data, "-l", log, "-o", options, "-w", "-t", "60", "start"]);
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    pid() {
      try {
        const pid = Number(readFileSync(path.join(data, "postmaster.pid"), "utf8").split("\n")[0]);
        return Number.isInteger(pid) && pid > 0 ? pid : undefined;
      } catch {
        return undefined;
      }
    },
    async restart() {
      await exec("pg_ctl", [
        "-D",
        data,
        "-l",
        log,
        "-o",
        options,
        "-m",
        "fast",
        "-w",
        "-t",
        "60",
        "restart",
      ]);
    },
    async stop() {
      await exec("pg_ctl", ["-D", data, "-m", "immediate", "-w", "stop"]).catch(() => {});
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** A NATS JetStream server of a test's own, which the test may restart on the same port and store. */
export interface PrivateNats {
  url: string;
  /** Its monitoring endpoint (`-m`): `/varz`, `/subsz`, `/connz` (same port after a restart). */
  monitorUrl: string;
  /** nats-server's pid now (a restart changes it). */
  pid(): number | undefined;
  /** NATS_URL, PIES_NATS_STREAM, PIES_NATS_SUBJECT_PREFIX for pies processes. */
  env: Record<string, string>;
  /**
   * Stops the server (SIGTERM, or `signal`: SIGKILL is as abrupt as a crash) and starts it again on
   * the same port and store directory, running `whileDown` (if given) in between.
   */
  restart(whileDown?: () => Promise<void>, signal?: NodeJS.Signals): Promise<void>;
  /** Kills the server and removes its store. */
  stop(): Promise<void>;
}

/** Resolves once a nats-server `child` accepts connections on `port` (throws if it exits). */
export async function untilListening(port: number, child: ChildProcess, timeoutMs = 20_000) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`nats-server exited with ${child.exitCode}`);
    const open = await new Promise<boolean>((resolve) => {
      const socket = connect(port, "127.0.0.1");
      socket.once("connect", () => (socket.destroy(), resolve(true)));
      socket.once("error", () => resolve(false));
    });
    if (open) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`nats-server did not listen on ${port} within ${timeoutMs} ms`);
}

/** Starts `nats-server -js` on a free loopback port with a store directory of its own. */
export async function startPrivateNats(): Promise<PrivateNats> {
  const dir = await mkdtemp(path.join(tmpdir(), "pies-nats-"));
  // One after the other: two asked at once could be handed the same free port.
  const port = await freePort();
  const monitorPort = await freePort();
  const launch = async () => {
    const child = spawn(
      process.env.PIES_TEST_NATS_SERVER ?? "nats-server",
      ["-js", "-a", "127.0.0.1", "-p", String(port), "-m", String(monitorPort), "-sd", dir],
      { stdio: "ignore" },
    );
    const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
    child.once("error", () => {});
    await untilListening(port, child);
    return { child, exited };
  };
  let server = await launch().catch(async (err: unknown) => {
    await rm(dir, { recursive: true, force: true });
    throw err;
  });
  const url = `nats://127.0.0.1:${port}`;
  const kill = async (signal: NodeJS.Signals) => {
    if (server.child.exitCode === null && server.child.signalCode === null) {
      server.child.kill(signal);
      await server.exited;
    }
  };
  return {
    url,
    monitorUrl: `http://127.0.0.1:${monitorPort}`,
    pid: () => server.child.pid,
    env: { NATS_URL: url, PIES_NATS_STREAM: "PIES_RUNS", PIES_NATS_SUBJECT_PREFIX: "pies" },
    async restart(whileDown, signal = "SIGTERM") {
      await kill(signal);
      try {
        await whileDown?.();
      } finally {
        server = await launch();
      }
    },
    async stop() {
      await kill("SIGKILL");
      await rm(dir, { recursive: true, force: true });
    },
  };
}
