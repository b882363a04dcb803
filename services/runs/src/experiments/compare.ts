import { create as createDiffer } from "jsondiffpatch";
import { format as asJsonPatch } from "jsondiffpatch/formatters/jsonpatch";
import type { JsonValue } from "@pies/common";

/**
 * Arrays compared item by item by value: an item moved or inserted shows as such, not as every
 * later item replaced. Objects hash by their canonical JSON (keys sorted).
 */
const differ = createDiffer({
  objectHash: (item: object) => canonical(item as JsonValue),
  arrays: { detectMove: true },
});

/** JSON text with every object's keys sorted: equal values, equal texts. */
export function canonical(value: JsonValue | undefined): string {
  return JSON.stringify(value, (_key, v: unknown) =>
    v && typeof v === "object" && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : v,
  );
}

/**
 * What changes the original result into the candidate, as JSON Patch operations (RFC 6902): []
 * when they are equal. A root that is not an object or array on either side is one replace of "".
 */
export function resultDiff(original: JsonValue | null, candidate: JsonValue | null): JsonValue[] {
  const container = (v: JsonValue | null) => v !== null && typeof v === "object";
  if (!container(original) || !container(candidate)) {
    return canonical(original) === canonical(candidate)
      ? []
      : [{ op: "replace", path: "", value: candidate }];
  }
  // jsondiffpatch's deltas keep references into its inputs: copies, since the results live on.
  const delta = differ.diff(structuredClone(original), structuredClone(candidate));
  return delta === undefined ? [] : (asJsonPatch(delta) as unknown as JsonValue[]);
}

/** The judge's score: its result's number field `score`, else undefined. */
export function judgeScore(result: JsonValue | null): number | undefined {
  if (result === null || typeof result !== "object" || Array.isArray(result)) return undefined;
  const score = result.score;
  return typeof score === "number" && Number.isFinite(score) ? score : undefined;
}
