// @ts-check
// What nats-server's monitoring port tells of its connections (`nats-server -m <port>`).

/** @typedef {{ in: number, out: number }} MessageCounts */

/**
 * The part of `/connz` read here.
 * @typedef {{ connections?: { name?: string, in_msgs: number, out_msgs: number }[] }} Connz
 */

/**
 * Messages in and out so far of each connection, by connection name (those of one name summed),
 * from `<monitor>/connz`; undefined without a monitor URL.
 * @param {string | undefined} monitor
 * @returns {Promise<Record<string, MessageCounts> | undefined>}
 */
export async function natsCounts(monitor) {
  if (!monitor) return undefined;
  const connz = /** @type {Connz} */ (await (await fetch(`${monitor}/connz?limit=1024`)).json());
  /** @type {Record<string, MessageCounts>} */
  const by = {};
  for (const c of connz.connections ?? []) {
    const name = c.name ?? "?";
    const counts = (by[name] ??= { in: 0, out: 0 });
    counts.in += c.in_msgs;
    counts.out += c.out_msgs;
  }
  return by;
}

/**
 * Messages per run of each connection between two natsCounts, as "<in> in, <out> out".
 * @param {Record<string, MessageCounts>} before
 * @param {Record<string, MessageCounts>} after
 * @param {number} runs
 */
export function msgsPerRun(before, after, runs) {
  return Object.fromEntries(
    Object.entries(after).map(([name, m]) => {
      const b = before[name] ?? { in: 0, out: 0 };
      /** @param {number} n */
      const per = (n) => (n / runs).toFixed(2);
      return [name, `${per(m.in - b.in)} in, ${per(m.out - b.out)} out`];
    }),
  );
}
