import type { JsonValue } from "./json.js";

/**
 * The JSON payloads of the internal contracts (a run's parameters, result, prompt, error data and
 * schemas, an execution's data) travel as `bytes` holding UTF-8 JSON text; empty bytes are no value
 * (no JSON text is empty, so JSON null is the four bytes `null`). These are the only conversions
 * between those bytes and JSON values (docs/decisions/0059-json-payloads-as-bytes.md).
 */
export const NO_JSON: Uint8Array = new Uint8Array(0);

const encoder = new TextEncoder();

/** The UTF-8 JSON text of `value`; empty for undefined. */
export function jsonBytes(value: unknown): Uint8Array {
  if (value === undefined) return NO_JSON;
  // An exact array of its own (Buffer.from of a short text would be a view of a shared 8 KiB pool,
  // which a run kept for minutes would keep alive).
  return encoder.encode(JSON.stringify(value));
}

/** The JSON text of `bytes`; undefined when empty. */
export function jsonTextOf(bytes: Uint8Array): string | undefined {
  if (bytes.length === 0) return undefined;
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("utf8");
}

/** The JSON value of `bytes`; undefined when empty. Throws on text that is not JSON. */
export function jsonOf(bytes: Uint8Array): JsonValue | undefined {
  const text = jsonTextOf(bytes);
  return text === undefined ? undefined : (JSON.parse(text) as JsonValue);
}
