import { fromJson, toJson, type JsonValue } from "@bufbuild/protobuf";
import {
  NullValue,
  ValueSchema,
  timestampDate,
  timestampFromDate,
  type Timestamp,
  type Value,
} from "@bufbuild/protobuf/wkt";

export type { JsonValue };
export type JsonObject = { [k: string]: JsonValue };

/**
 * google.protobuf.Value from plain JSON (undefined stays undefined): what
 * `fromJson(ValueSchema, json)` makes, built as object literals. protobuf-es builds each message
 * field by field from its descriptor, which costs more and leaves objects that V8 keeps as
 * dictionaries (slower to read: every run's prompt and result are read again to encode the run).
 * Anything but JSON (undefined in an array, a function) or nesting near protobuf-es's recursion
 * limit goes to fromJson, which throws as it did.
 */
export function toValue(json: unknown): Value | undefined {
  if (json === undefined) return undefined;
  return valueOf(json, 0) ?? fromJson(ValueSchema, json as JsonValue);
}

/** fromJson's own limit is 100 levels (counting the Value itself twice); below it, a margin. */
const LITERAL_DEPTH = 90;

/** The Value of `json`, or undefined when fromJson should decide. */
function valueOf(json: unknown, depth: number): Value | undefined {
  switch (typeof json) {
    case "number":
      return { $typeName: "google.protobuf.Value", kind: { case: "numberValue", value: json } };
    case "string":
      return { $typeName: "google.protobuf.Value", kind: { case: "stringValue", value: json } };
    case "boolean":
      return { $typeName: "google.protobuf.Value", kind: { case: "boolValue", value: json } };
    case "object": {
      if (json === null) {
        return {
          $typeName: "google.protobuf.Value",
          kind: { case: "nullValue", value: NullValue.NULL_VALUE },
        };
      }
      if (depth >= LITERAL_DEPTH) return undefined;
      if (Array.isArray(json)) {
        const values: Value[] = [];
        for (const item of json as unknown[]) {
          const value = valueOf(item, depth + 1);
          if (value === undefined) return undefined;
          values.push(value);
        }
        return {
          $typeName: "google.protobuf.Value",
          kind: { case: "listValue", value: { $typeName: "google.protobuf.ListValue", values } },
        };
      }
      const fields: { [key: string]: Value } = {};
      for (const [key, item] of Object.entries(json)) {
        const value = valueOf(item, depth + 1);
        if (value === undefined) return undefined;
        fields[key] = value;
      }
      return {
        $typeName: "google.protobuf.Value",
        kind: { case: "structValue", value: { $typeName: "google.protobuf.Struct", fields } },
      };
    }
    default:
      return undefined;
  }
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
