/** Bounds of an experiment (DESIGN.md §13), checked by the gateway and the runs service. */
export const EXPERIMENT_LIMITS = {
  /** Runs one experiment selects at most. */
  runs: 1_000,
  /** Pairs replayed at once: the default, and the most. */
  concurrency: { default: 4, max: 16 },
  /** Experiments a list answers at once: the default, and the most. */
  page: { default: 20, max: 100 },
  nameLength: 200,
  /**
   * Experiments of a project running at once (the next is refused, 429): each holds up to
   * `runs` pairs, replayed by processes that take at most 4 experiments each at once.
   */
  runningPerProject: 10,
} as const;
