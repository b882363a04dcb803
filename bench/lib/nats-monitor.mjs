// What nats-server's monitoring port tells of its connections (`nats-server -m <port>`).

/**
 * Messages in and out so far of each connection, by connection name (those of one name summed),
 * from `<monitor>/connz`; undefined without a monitor URL.
 */
export async function natsCounts(monitor) {
  if (!monitor) return undefined;
  const connz = await (await fetch(`${monitor}/connz?limit=1024`)).json();
  const by = {};
  for (const c of connz.connections ?? []) {
    const name = c.name ?? "?";
    by[name] ??= { in: 0, out: 0 };
    by[name].in += c.in_msgs;
    by[name].out += c.out_msgs;
  }
  return by;
}

/** Messages per run of each connection between two natsCounts, as "<in> in, <out> out". */
export function msgsPerRun(before, after, runs) {
  return Object.fromEntries(
    Object.entries(after).map(([name, m]) => {
      const b = before[name] ?? { in: 0, out: 0 };
      const per = (n) => (n / runs).toFixed(2);
      return [name, `${per(m.in - b.in)} in, ${per(m.out - b.out)} out`];
    }),
  );
}
