// @ts-check
import { spawnSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";

/**
 * CPU pinning with taskset: the load generator and the fake upstream (this process and its worker
 * threads) on one CPU, the system under test (pies' four processes, Portkey) on another, so that
 * the two sides do not take each other's time slices. PostgreSQL and NATS are shared system
 * services and are not pinned.
 */

/**
 * The CPUs this process may run on (Cpus_allowed_list), ascending.
 * @returns {number[]}
 */
function allowedCpus() {
  try {
    const status = readFileSync("/proc/self/status", "utf8");
    const list = /^Cpus_allowed_list:\s*(.+)$/m.exec(status)?.[1] ?? "";
    return list.split(",").flatMap((part) => {
      const [a, b] = part.split("-").map(Number);
      if (a === undefined || !Number.isInteger(a)) return [];
      return b === undefined ? [a] : Array.from({ length: b - a + 1 }, (_, i) => a + i);
    });
  } catch {
    return [];
  }
}

/**
 * The CPUs each thread of a process may run on (from /proc), distinct values joined by " | ",
 * e.g. "1"; undefined if unreadable.
 * @param {number | undefined} pid
 */
export function cpusOf(pid) {
  try {
    const lists = new Set(
      readdirSync(`/proc/${pid}/task`).map(
        (tid) =>
          /^Cpus_allowed_list:\s*(.+)$/m.exec(
            readFileSync(`/proc/${pid}/task/${tid}/status`, "utf8"),
          )?.[1],
      ),
    );
    return [...lists].join(" | ");
  } catch {
    return undefined;
  }
}

/**
 * @typedef {{ enabled: false, note: string, launcher: string[] }
 *   | { enabled: true, note: string, launcher: string[], loadCpu: number, sutCpu: number }} Pinning
 */

/**
 * The pinning plan: { enabled, note, loadCpu?, sutCpu?, launcher } where launcher is the command
 * prefix for the system under test (`taskset -c <sutCpu>`), empty when not pinning. On by default
 * when taskset exists and at least two CPUs are allowed; BENCH_PIN=0 turns it off.
 * @returns {Pinning}
 */
export function planPinning(env = process.env) {
  /**
   * @param {string} note
   * @returns {Pinning}
   */
  const off = (note) => ({ enabled: false, note, launcher: [] });
  if (env.BENCH_PIN === "0") return off("pinning off (BENCH_PIN=0)");
  const taskset = spawnSync("taskset", ["-V"], { stdio: "ignore" });
  if (taskset.error || taskset.status !== 0) return off("pinning off: taskset not found");
  const cpus = allowedCpus();
  const [loadCpu, sutCpu] = cpus;
  if (loadCpu === undefined || sutCpu === undefined) {
    return off(`pinning off: only ${cpus.length} CPU(s) available`);
  }
  return {
    enabled: true,
    loadCpu,
    sutCpu,
    launcher: ["taskset", "-c", String(sutCpu)],
    note: `pinned: load generator + fake upstream on CPU ${loadCpu}, pies processes and Portkey on CPU ${sutCpu}; PostgreSQL and NATS not pinned`,
  };
}

/**
 * Pins every thread of this process to `cpu` (threads started later inherit it). Throws on failure.
 * @param {number} cpu
 */
export function pinSelf(cpu) {
  const result = spawnSync("taskset", ["-a", "-p", "-c", String(cpu), String(process.pid)], {
    encoding: "utf8",
  });
  if (result.error || result.status !== 0) {
    throw new Error(
      `taskset -a -p -c ${cpu} ${process.pid} failed: ${result.error?.message ?? result.stderr.trim()}`,
    );
  }
}
