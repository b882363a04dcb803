import { fromJson, toJson, type JsonValue } from "@bufbuild/protobuf";
import {
  ValueSchema,
  timestampDate,
  timestampFromDate,
  type Timestamp,
  type Value,
} from "@bufbuild/protobuf/wkt";

export type { JsonValue };
export type JsonObject = { [k: string]: JsonValue };

/** google.protobuf.Value from plain JSON (undefined stays undefined). */
export function toValue(json: unknown): Value | undefined {
  return json === undefined ? undefined : fromJson(ValueSchema, json as JsonValue);
}

/** Plain JSON from google.protobuf.Value (undefined when unset). */
export function fromValue(value: Value | undefined): JsonValue | undefined {
  return value === undefined ? undefined : toJson(ValueSchema, value);
}

export function toTimestamp(date: Date | string | undefined | null): Timestamp | undefined {
  if (date === undefined || date === null) return undefined;
  return timestampFromDate(typeof date === "string" ? new Date(date) : date);
}

export function fromTimestamp(ts: Timestamp | undefined): Date | undefined {
  return ts ? timestampDate(ts) : undefined;
}
