// @ts-check
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";

/**
 * Self time by frame from V8 CPU profiles (`node --cpu-prof`, .cpuprofile JSON). Sample times are
 * V8's monotonic clock in µs, the same clock as process.hrtime() in any process on the machine, so
 * a profile can be cut to the window of one measured phase of the bench.
 */

/**
 * The parts of a V8 .cpuprofile read here (DevTools protocol's Profiler.Profile).
 * @typedef {object} CpuProfile
 * @property {{ id: number, callFrame: CallFrame }[]} nodes
 * @property {number} startTime µs
 * @property {number} endTime µs
 * @property {number[]} samples node ids
 * @property {number[]} timeDeltas µs since the previous sample
 */

/** @typedef {{ functionName: string, url: string, lineNumber: number }} CallFrame */

/** @typedef {{ process: string, pid: number, tid: number, file: string }} ProfileFile */

/**
 * Self time by frame, summed over samples (see addSelfTimes).
 * @typedef {object} SelfTimes
 * @property {number} totalUs
 * @property {Map<string, { name: string, url: string, line: number | undefined, selfUs: number }>} frames
 */

/**
 * The .cpuprofile files under `dir`/<process>/ : [{ process, pid, tid, file }] (tid 0 is the main
 * thread, others are worker threads). Node names them CPU.<date>.<time>.<pid>.<tid>.<seq>.cpuprofile.
 * @param {string} dir
 */
export function listProfiles(dir) {
  /** @type {ProfileFile[]} */
  const out = [];
  let names;
  try {
    names = readdirSync(dir, { withFileTypes: true });
  } catch {
    return out;
  }
  for (const entry of names) {
    if (!entry.isDirectory()) continue;
    for (const file of readdirSync(path.join(dir, entry.name))) {
      const m = /^CPU\.\d+\.\d+\.(\d+)\.(\d+)\.\d+\.cpuprofile$/.exec(file);
      if (!m) continue;
      out.push({
        process: entry.name,
        pid: Number(m[1]),
        tid: Number(m[2]),
        file: path.join(dir, entry.name, file),
      });
    }
  }
  return out.sort((a, b) => a.process.localeCompare(b.process) || a.pid - b.pid || a.tid - b.tid);
}

/**
 * @param {string} file
 * @returns {CpuProfile}
 */
export function loadProfile(file) {
  return JSON.parse(readFileSync(file, "utf8"));
}

/**
 * Adds the self time of `profile`'s samples taken in [fromUs, toUs) (whole profile when omitted)
 * to `into` ({ totalUs, frames: Map(key -> { name, url, line, selfUs }) }) and returns it. A
 * sample's time is the gap to the next sample (to endTime for the last), as DevTools counts it.
 * @param {CpuProfile} profile
 * @param {{ fromUs?: number, toUs?: number }} [window]
 * @param {SelfTimes} [into]
 * @returns {SelfTimes}
 */
export function addSelfTimes(profile, { fromUs = -Infinity, toUs = Infinity } = {}, into) {
  const agg = into ?? { totalUs: 0, frames: new Map() };
  const byId = new Map(profile.nodes.map((n) => [n.id, n.callFrame]));
  const { samples, timeDeltas } = profile;
  let t = profile.startTime;
  /** @type {number[]} */
  const times = new Array(samples.length);
  for (let i = 0; i < samples.length; i++) {
    t += timeDeltas[i] ?? 0;
    times[i] = t;
  }
  for (let i = 0; i < samples.length; i++) {
    // times has an entry per sample.
    const time = /** @type {number} */ (times[i]);
    if (time < fromUs || time >= toUs) continue;
    const next = i + 1 < samples.length ? /** @type {number} */ (times[i + 1]) : profile.endTime;
    const us = Math.max(0, Math.min(next, toUs) - time);
    const frame = byId.get(/** @type {number} */ (samples[i]));
    if (!frame) continue;
    const key = `${frame.functionName}\u0000${frame.url}\u0000${frame.lineNumber}`;
    let entry = agg.frames.get(key);
    if (!entry) {
      entry = {
        name: frame.functionName || "(anonymous)",
        url: frame.url,
        line: frame.lineNumber >= 0 ? frame.lineNumber + 1 : undefined,
        selfUs: 0,
      };
      agg.frames.set(key, entry);
    }
    entry.selfUs += us;
    agg.totalUs += us;
  }
  return agg;
}

/**
 * A url as something readable: a package path from node_modules, or a repository path.
 * @param {string} url
 * @param {string} [repoRoot]
 */
export function shortUrl(url, repoRoot) {
  if (!url) return "";
  let u = url.replace(/^file:\/\//, "");
  const nm = u.lastIndexOf("/node_modules/");
  if (nm >= 0) u = u.slice(nm + "/node_modules/".length);
  else if (repoRoot && u.startsWith(repoRoot + "/")) u = u.slice(repoRoot.length + 1);
  return u.length > 60 ? `…${u.slice(-59)}` : u;
}

/**
 * The top `limit` frames by self time: [{ name, where, selfMs, selfPercent }], plus busyPercent
 * (all but "(idle)") and totalMs. Percentages are of all sampled time in the window.
 * @param {SelfTimes} agg
 * @param {{ limit?: number, repoRoot?: string }} [options]
 */
export function topFrames(agg, { limit = 15, repoRoot } = {}) {
  const total = agg.totalUs;
  const frames = [...agg.frames.values()].sort((a, b) => b.selfUs - a.selfUs);
  const idle = frames.filter((f) => f.name === "(idle)").reduce((n, f) => n + f.selfUs, 0);
  /** @param {number} us */
  const pct = (us) => (total > 0 ? Number(((us / total) * 100).toFixed(1)) : 0);
  return {
    totalMs: Math.round(total / 1000),
    busyPercent: pct(total - idle),
    frames: frames.slice(0, limit).map((f) => ({
      name: f.name,
      where: f.url ? `${shortUrl(f.url, repoRoot)}${f.line ? `:${f.line}` : ""}` : "",
      selfMs: Number((f.selfUs / 1000).toFixed(1)),
      selfPercent: pct(f.selfUs),
    })),
  };
}

/**
 * Text lines for topFrames' result, indented.
 * @param {ReturnType<typeof topFrames>} top
 */
export function formatTopFrames(top, indent = "    ") {
  const nameWidth = Math.min(48, Math.max(8, ...top.frames.map((f) => f.name.length)));
  return top.frames.map(
    (f) =>
      `${indent}${f.selfPercent.toFixed(1).padStart(5)}%  ${f.selfMs.toFixed(1).padStart(8)} ms  ` +
      `${f.name.slice(0, 48).padEnd(nameWidth)}  ${f.where}`,
  );
}
