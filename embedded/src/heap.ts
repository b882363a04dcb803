import { setFlagsFromString } from "node:v8";

/**
 * Bounds how far V8 lets the heap grow past what its last full collection kept: `percent` more
 * (100: up to twice as much), as Go's GOGC does; 0 leaves V8's own choice. Left to itself V8 lets
 * it grow up to four times what is kept, by its estimate of how quick its collections are, and
 * the process's memory then moves with that estimate rather than with what it keeps
 * (docs/decisions/0058-embedded-heap-growth-bounded.md). V8 reads the flag each time it sets the
 * next limit, so setting it at start does what the command line's `--heap-growing-percent` does
 * (which NODE_OPTIONS does not take, and every launcher would have to repeat).
 */
export function setHeapGrowth(percent: number): void {
  if (percent > 0) setFlagsFromString(`--heap-growing-percent=${percent}`);
}
