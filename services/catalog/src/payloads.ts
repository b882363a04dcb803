import { invalid, jsonOf, type JsonObject, type JsonValue } from "@pies/common";

/**
 * A JSON payload of a write (test data, a schema, an environment's config), which travels as
 * bytes of JSON text (decision 0059): undefined when the field is unset (the stored value stays),
 * null when it is cleared (an empty object, or null), the object otherwise. INVALID_ARGUMENT,
 * naming the field, when the bytes are not JSON or not an object.
 */
export function payloadOf(
  field: string,
  bytes: Uint8Array | undefined,
): JsonObject | null | undefined {
  if (bytes === undefined || bytes.length === 0) return undefined;
  let value: JsonValue | undefined;
  try {
    value = jsonOf(bytes);
  } catch (err) {
    throw invalid(`${field}: not JSON: ${(err as Error).message}`);
  }
  if (value === null || value === undefined) return null;
  if (typeof value !== "object" || Array.isArray(value))
    throw invalid(`${field}: must be a JSON object`);
  return Object.keys(value).length === 0 ? null : value;
}
