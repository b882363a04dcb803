import { z } from "zod";
import { interactionStatuses, type InteractionStatus } from "@pies/proto/catalog";
import { fromTimestamp } from "@pies/common";
import type { Timestamp } from "@bufbuild/protobuf/wkt";

/** ISO 8601 of a timestamp, or undefined. */
export const iso = (ts: Timestamp | undefined) => fromTimestamp(ts)?.toISOString();

export const jsonObject = z.record(z.string(), z.unknown());

/**
 * Drops undefined members so that they are absent from the JSON rather than null. A copy (in the
 * same order): deleting members would turn the object into a slow dictionary for JSON.stringify.
 */
export function compact<T extends Record<string, unknown>>(obj: T): T {
  const out: Record<string, unknown> = {};
  for (const key of Object.keys(obj)) if (obj[key] !== undefined) out[key] = obj[key];
  return out as T;
}

/** The name of an interaction's, version's or template's status (SPEC.md); unset reads as draft. */
export const statusNameOf = (s: InteractionStatus) => interactionStatuses.name(s) ?? "draft";
