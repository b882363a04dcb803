import { readdirSync, readFileSync } from "node:fs";
import os from "node:os";
import { performance } from "node:perf_hooks";

// CPU accounting for one measured phase: % of one core used by each pies process (from
// /proc/<pid>/stat, Linux only), by this process (load generator + fake upstream worker), and the
// machine's busy %. PostgreSQL and NATS are shared servers: their columns are every "postgres" /
// "nats-server" process on the machine, so other users of them are included. 100% = one core.

const TICKS_PER_SECOND = 100; // USER_HZ on Linux

/** The fields of /proc/<pid>/stat after the command name (state, ppid, …); throws if gone. */
function statFields(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  return stat.slice(stat.lastIndexOf(")") + 2).split(" ");
}

/** utime + stime from statFields. */
const cpuTicks = (fields) => Number(fields[11]) + Number(fields[12]);

/** A process's CPU (utime + stime) in clock ticks; undefined when it is gone or unreadable. */
export function processTicks(pid) {
  try {
    return cpuTicks(statFields(pid));
  } catch {
    return undefined;
  }
}

/** processTicks, 0 for a process that is gone or unreadable (or not named: NaN). */
export const ticksOf = (pid) => processTicks(pid) ?? 0;

/**
 * The ticks of one PostgreSQL cluster by pid: the postmaster `pgPid` and each of its children
 * (backends come and go: one new since a reading counts from 0 in ticksSince). Each process's
 * parent and ticks come from one reading of its stat.
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

/** The ticks spent between two readings of clusterTicks. */
export function ticksSince(before, after) {
  let ticks = 0;
  for (const [pid, v] of after) ticks += v - (before.get(pid) ?? 0);
  return ticks;
}

/** Ticks per pid of every process whose command name is one of `names` (name -> Map(pid, ticks)). */
function ticksByName(names) {
  const out = Object.fromEntries(names.map((n) => [n, new Map()]));
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
    if (!(comm in out)) continue;
    const ticks = processTicks(pid);
    if (ticks !== undefined) out[comm].set(pid, ticks);
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

/** Starts a measurement over `processes` ([{name, child}]); the returned function ends it. */
export function startCpuSample(processes) {
  const started = performance.now();
  const self = process.cpuUsage();
  const before = processes.map((p) => processTicks(p.child.pid));
  const serversBefore = ticksByName(Object.keys(SERVERS));
  const machine = machineTimes();
  return () => {
    const seconds = (performance.now() - started) / 1000;
    if (seconds <= 0) return undefined;
    const percent = {};
    processes.forEach((p, i) => {
      const after = processTicks(p.child.pid);
      if (after !== undefined && before[i] !== undefined) {
        percent[p.name] = Math.round(((after - before[i]) / TICKS_PER_SECOND / seconds) * 100);
      }
    });
    const serversAfter = ticksByName(Object.keys(SERVERS));
    for (const [comm, label] of Object.entries(SERVERS)) {
      let ticks = 0;
      // A process started during the phase counts from 0 (its whole life is inside the phase).
      for (const [pid, after] of serversAfter[comm])
        ticks += after - (serversBefore[comm].get(pid) ?? 0);
      if (serversAfter[comm].size > 0) {
        percent[label] = Math.round((ticks / TICKS_PER_SECOND / seconds) * 100);
      }
    }
    const selfUsed = process.cpuUsage(self);
    percent.bench = Math.round(((selfUsed.user + selfUsed.system) / 1e6 / seconds) * 100);
    const m = machineTimes();
    const total = m.total - machine.total;
    const machineBusy = total > 0 ? Math.round(((m.busy - machine.busy) / total) * 100) : undefined;
    // Everything else on the machine (other users' processes, the kernel), in the same unit.
    if (machineBusy !== undefined) {
      const listed = Object.values(percent).reduce((a, b) => a + b, 0);
      percent.other = Math.max(0, Math.round(machineBusy * os.cpus().length - listed));
    }
    return { processPercent: percent, machineBusyPercent: machineBusy };
  };
}
