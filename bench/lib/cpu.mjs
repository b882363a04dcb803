// @ts-check
import { readdirSync, readFileSync } from "node:fs";
import os from "node:os";
import { performance } from "node:perf_hooks";

// CPU accounting for one measured phase: % of one core used by each pies process (from
// /proc/<pid>/stat, Linux only), by this process (load generator + fake upstream worker), and the
// machine's busy %; and each pies process's RSS at the phase's end (/proc/<pid>/status).
// PostgreSQL and NATS are shared servers: their columns are every "postgres" / "nats-server"
// process on the machine, so other users of them are included. 100% = one core.

const TICKS_PER_SECOND = 100; // USER_HZ on Linux

/**
 * The fields of /proc/<pid>/stat after the command name (state, ppid, …); throws if gone.
 * @param {number | string | undefined} pid
 */
function statFields(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  return stat.slice(stat.lastIndexOf(")") + 2).split(" ");
}

/**
 * utime + stime from statFields.
 * @param {string[]} fields
 */
const cpuTicks = (fields) => Number(fields[11]) + Number(fields[12]);

/**
 * A process's CPU (utime + stime) in clock ticks; undefined when it is gone or unreadable.
 * @param {number | string | undefined} pid
 * @returns {number | undefined}
 */
export function processTicks(pid) {
  try {
    return cpuTicks(statFields(pid));
  } catch {
    return undefined;
  }
}

/**
 * processTicks, 0 for a process that is gone or unreadable (or not named: NaN).
 * @param {number | string | undefined} pid
 */
export const ticksOf = (pid) => processTicks(pid) ?? 0;

/**
 * A process's resident set in MiB (VmRSS), undefined when it is gone.
 * @param {number | undefined} pid
 */
export function rssMiB(pid) {
  try {
    const kb = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1];
    return kb === undefined ? undefined : Number(kb) / 1024;
  } catch {
    return undefined;
  }
}

/**
 * The ticks of one PostgreSQL cluster by pid: the postmaster `pgPid` and each of its children
 * (backends come and go: one new since a reading counts from 0 in ticksSince). Each process's
 * parent and ticks come from one reading of its stat.
 * @param {number} pgPid
 * @returns {Map<number, number>}
 */
export function clusterTicks(pgPid) {
  const out = new Map([[pgPid, ticksOf(pgPid)]]);
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const fields = statFields(d);
      if (Number(fields[1]) === pgPid) out.set(Number(d), cpuTicks(fields));
    } catch {
      // gone
    }
  }
  return out;
}

/**
 * The ticks spent between two readings of clusterTicks.
 * @param {Map<number, number>} before
 * @param {Map<number, number>} after
 */
export function ticksSince(before, after) {
  let ticks = 0;
  for (const [pid, v] of after) ticks += v - (before.get(pid) ?? 0);
  return ticks;
}

/**
 * Ticks per pid of every process whose command name is one of `names` (name -> Map(pid, ticks)).
 * @param {string[]} names
 * @returns {Map<string, Map<string, number>>}
 */
function ticksByName(names) {
  /** @type {Map<string, Map<string, number>>} */
  const out = new Map(names.map((n) => [n, new Map()]));
  let pids;
  try {
    pids = readdirSync("/proc").filter((d) => /^\d+$/.test(d));
  } catch {
    return out;
  }
  for (const pid of pids) {
    let comm;
    try {
      comm = readFileSync(`/proc/${pid}/comm`, "utf8").trim();
    } catch {
      continue;
    }
    const byPid = out.get(comm);
    if (!byPid) continue;
    const ticks = processTicks(pid);
    if (ticks !== undefined) byPid.set(pid, ticks);
  }
  return out;
}

const SERVERS = { postgres: "postgres", "nats-server": "nats" };

function machineTimes() {
  let busy = 0;
  let total = 0;
  for (const cpu of os.cpus()) {
    const t = cpu.times;
    const all = t.user + t.nice + t.sys + t.idle + t.irq;
    total += all;
    busy += all - t.idle;
  }
  return { busy, total };
}

/**
 * CPU during a measured phase: % of one core by name (pies' processes, postgres, nats, bench,
 * other), the same as CPU time in ms (all but other: the ticks read, so in steps of 10 ms), the
 * resident set of each process measured (not postgres, nats or bench) at the phase's end in MiB,
 * and the machine's busy %.
 * @typedef {object} CpuSample
 * @property {Record<string, number>} processPercent
 * @property {Record<string, number>} processCpuMs
 * @property {Record<string, number>} rssMiB
 * @property {number | undefined} machineBusyPercent
 */

/**
 * Starts a measurement over `processes` ([{name, child}]); the returned function ends it (and
 * reads their RSS then).
 * @param {{ name: string, child: { pid?: number } }[]} processes
 * @returns {() => CpuSample | undefined}
 */
export function startCpuSample(processes) {
  const started = performance.now();
  const self = process.cpuUsage();
  const before = processes.map((p) => processTicks(p.child.pid));
  const serversBefore = ticksByName(Object.keys(SERVERS));
  const machine = machineTimes();
  return () => {
    const seconds = (performance.now() - started) / 1000;
    if (seconds <= 0) return undefined;
    /** @type {Record<string, number>} */
    const percent = {};
    /** @type {Record<string, number>} */
    const cpuMs = {};
    /** @type {Record<string, number>} */
    const rss = {};
    /**
     * @param {string} name
     * @param {number} ticks
     */
    const used = (name, ticks) => {
      percent[name] = Math.round((ticks / TICKS_PER_SECOND / seconds) * 100);
      cpuMs[name] = (ticks * 1000) / TICKS_PER_SECOND;
    };
    processes.forEach((p, i) => {
      const after = processTicks(p.child.pid);
      const ticksBefore = before[i];
      if (after !== undefined && ticksBefore !== undefined) used(p.name, after - ticksBefore);
      const mib = rssMiB(p.child.pid);
      if (mib !== undefined) rss[p.name] = Math.round(mib * 10) / 10;
    });
    const serversAfter = ticksByName(Object.keys(SERVERS));
    for (const [comm, label] of Object.entries(SERVERS)) {
      let ticks = 0;
      // ticksByName has a map for each name asked.
      const now = serversAfter.get(comm) ?? new Map();
      const then = serversBefore.get(comm) ?? new Map();
      // A process started during the phase counts from 0 (its whole life is inside the phase).
      for (const [pid, after] of now) ticks += after - (then.get(pid) ?? 0);
      if (now.size > 0) used(label, ticks);
    }
    const selfUsed = process.cpuUsage(self);
    percent.bench = Math.round(((selfUsed.user + selfUsed.system) / 1e6 / seconds) * 100);
    cpuMs.bench = Math.round((selfUsed.user + selfUsed.system) / 1000);
    const m = machineTimes();
    const total = m.total - machine.total;
    const machineBusy = total > 0 ? Math.round(((m.busy - machine.busy) / total) * 100) : undefined;
    // Everything else on the machine (other users' processes, the kernel), in the same unit.
    if (machineBusy !== undefined) {
      const listed = Object.values(percent).reduce((a, b) => a + b, 0);
      percent.other = Math.max(0, Math.round(machineBusy * os.cpus().length - listed));
    }
    return {
      processPercent: percent,
      processCpuMs: cpuMs,
      rssMiB: rss,
      machineBusyPercent: machineBusy,
    };
  };
}
