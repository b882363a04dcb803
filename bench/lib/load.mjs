// @ts-check
import { performance } from "node:perf_hooks";

/** @import { Sample } from "./modes.mjs" */

/**
 * Closed-loop load: `concurrency` workers each send one request after another. A warm-up phase
 * (results discarded) is followed by a measured phase; requests started in the measured phase are
 * all waited for (each bounded by requestTimeoutMs) and recorded. Stops early when `stop` aborts.
 * onMeasure() is called as the measured phase starts and returns a function called as it ends
 * (used for CPU accounting). Requests that fail because `stop` aborted them are not samples (they
 * are counted in `interrupted`). Returns { samples, interrupted, wallMs, stoppedEarly, measured }.
 * @template [M=unknown] what onMeasure's returned function returns (e.g. a CPU sample)
 * @param {object} cell
 * @param {(signal: AbortSignal) => Promise<Sample>} cell.request one request; never throws
 * @param {number} cell.concurrency
 * @param {number} cell.warmupMs
 * @param {number} cell.durationMs
 * @param {number} cell.maxRequests
 * @param {number} cell.requestTimeoutMs
 * @param {AbortSignal} cell.stop
 * @param {() => () => M} [cell.onMeasure]
 * @returns {Promise<{ samples: Sample[], interrupted: number, wallMs: number, stoppedEarly: boolean, measured?: M }>}
 */
export async function runCell({
  request,
  concurrency,
  warmupMs,
  durationMs,
  maxRequests,
  requestTimeoutMs,
  stop,
  onMeasure,
}) {
  /**
   * @param {number} ms
   * @param {boolean} record
   */
  const phase = async (ms, record) => {
    /** @type {Sample[]} */
    const samples = [];
    const started = performance.now();
    const end = started + ms;
    let issued = 0;
    let lastFinish = started;
    let interrupted = 0;
    const worker = async () => {
      while (!stop.aborted && performance.now() < end && (!record || issued < maxRequests)) {
        issued++;
        const signal = AbortSignal.any([stop, AbortSignal.timeout(requestTimeoutMs)]);
        const sample = await request(signal);
        if (!sample.ok && stop.aborted) {
          interrupted++;
          continue;
        }
        lastFinish = performance.now();
        if (record) samples.push(sample);
      }
    };
    await Promise.all(Array.from({ length: concurrency }, worker));
    return { samples, interrupted, wallMs: lastFinish - started };
  };
  if (warmupMs > 0) await phase(warmupMs, false);
  if (stop.aborted) return { samples: [], interrupted: 0, wallMs: 0, stoppedEarly: true };
  const end = onMeasure?.();
  const { samples, interrupted, wallMs } = await phase(durationMs, true);
  return { samples, interrupted, wallMs, stoppedEarly: stop.aborted, measured: end?.() };
}
