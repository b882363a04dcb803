import { setFlagsFromString } from "node:v8";

/**
 * Bounds how far V8 lets the heap grow past what its last full collection kept: `percent` more
 * (100: up to twice as much), as Go's GOGC does; 0 leaves V8's own choice. Left to itself, V8
 * grows the heap up to four times what is kept when collections are quick beside the allocation
 * rate, and where it settles varies with how quick they were: the embedded mode's soak kept a
 * steady 114 MB and its RSS swung between 420 and 660 MiB from one run to the next
 * (docs/decisions/0058-embedded-heap-growth-bounded.md). V8 reads the flag each time it sets the
 * next limit, so setting it at start is as the command line's `--heap-growing-percent` (which
 * NODE_OPTIONS does not take, and `npm start` would have to repeat).
 */
export function setHeapGrowth(percent: number): void {
  if (percent > 0) setFlagsFromString(`--heap-growing-percent=${percent}`);
}
