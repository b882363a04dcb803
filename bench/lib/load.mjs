import { performance } from "node:perf_hooks";

/**
 * Closed-loop load: `concurrency` workers each send one request after another. A warm-up phase
 * (results discarded) is followed by a measured phase; requests started in the measured phase are
 * all waited for (each bounded by requestTimeoutMs) and recorded. Stops early when `stop` aborts.
 * Returns { samples, wallMs, stoppedEarly }.
 */
export async function runCell({ request, concurrency, warmupMs, durationMs, maxRequests, requestTimeoutMs, stop }) {
  const phase = async (ms, record) => {
    const samples = [];
    const started = performance.now();
    const end = started + ms;
    let issued = 0;
    let lastFinish = started;
    const worker = async () => {
      while (!stop.aborted && performance.now() < end && (!record || issued < maxRequests)) {
        issued++;
        const signal = AbortSignal.any([stop, AbortSignal.timeout(requestTimeoutMs)]);
        const sample = await request(signal);
        lastFinish = performance.now();
        if (record) samples.push(sample);
      }
    };
    await Promise.all(Array.from({ length: concurrency }, worker));
    return { samples, wallMs: lastFinish - started };
  };
  if (warmupMs > 0) await phase(warmupMs, false);
  const { samples, wallMs } = await phase(durationMs, true);
  return { samples, wallMs, stoppedEarly: stop.aborted };
}
