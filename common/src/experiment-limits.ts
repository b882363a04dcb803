/** Bounds of an experiment (DESIGN.md §13), checked by the gateway and the runs service. */
export const EXPERIMENT_LIMITS = {
  /** Runs one experiment selects at most. */
  runs: 1_000,
  /** Pairs replayed at once: the default, and the most. */
  concurrency: { default: 4, max: 16 },
  /** Experiments a list answers at once: the default, and the most. */
  page: { default: 20, max: 100 },
  nameLength: 200,
} as const;
