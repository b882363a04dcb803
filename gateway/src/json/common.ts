import { z } from "zod";
import { interactionStatuses, type InteractionStatus } from "@pies/proto/catalog";
import { fromTimestamp, jsonBytes } from "@pies/common";
import type { Timestamp } from "@bufbuild/protobuf/wkt";

/** ISO 8601 of a timestamp, or undefined. */
export const iso = (ts: Timestamp | undefined) => fromTimestamp(ts)?.toISOString();

export const jsonObject = z.record(z.string(), z.unknown());

// Drops undefined members (one definition, with the REST run's).
export { compact } from "@pies/common";

/** The bytes of an optional JSON payload of a write: unset when the body leaves it out. */
export const payloadBytes = (value: unknown) =>
  value === undefined ? undefined : jsonBytes(value);

/** The name of an interaction's, version's or template's status (SPEC.md); unset reads as draft. */
export const statusNameOf = (s: InteractionStatus) => interactionStatuses.name(s) ?? "draft";
