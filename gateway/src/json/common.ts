import { z } from "zod";
import { InteractionStatus } from "@pies/proto/catalog";
import { fromTimestamp } from "@pies/common";
import type { Timestamp } from "@bufbuild/protobuf/wkt";

/** ISO 8601 of a timestamp, or undefined. */
export const iso = (ts: Timestamp | undefined) => fromTimestamp(ts)?.toISOString();

export const jsonObject = z.record(z.string(), z.unknown());

/** Drops undefined members so that they are absent from the JSON rather than null. */
export function compact<T extends Record<string, unknown>>(obj: T): T {
  for (const key of Object.keys(obj)) if (obj[key] === undefined) delete obj[key];
  return obj;
}

/** Status of interactions, versions and prompt templates, by name (SPEC.md). */
export const statuses = ["draft", "published", "archived"] as const;
export const statusByName: Record<string, InteractionStatus> = {
  draft: InteractionStatus.DRAFT,
  published: InteractionStatus.PUBLISHED,
  archived: InteractionStatus.ARCHIVED,
};
export const statusNameOf = (s: InteractionStatus) => statuses[s - 1] ?? "draft";
