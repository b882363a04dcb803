import { toJson, type DescField, type DescMessage, type Message } from "@bufbuild/protobuf";
import { ValueSchema, type Value } from "@bufbuild/protobuf/wkt";
import { jsonBytes, jsonOf } from "./json-bytes.js";
import { toValue, type JsonObject, type JsonValue } from "./json.js";

/**
 * The bridge between the JSON payloads as the releases before decision 0059 wrote them
 * (google.protobuf.Struct/Value fields, now `[deprecated = true]`) and as bytes of JSON text (the
 * field of the same name with `_json`). Every process of this release reads both: `upgradePayloads`
 * moves an old field's value into its bytes, at each boundary where a message written by another
 * process arrives (Connect calls, both ways: payloadsInterceptor; stored runs: decodeStoredRun).
 * With PIES_WRITE_LEGACY_PAYLOADS=true, for the length of a rolling upgrade from such a release, it
 * writes both too (`downgradePayloads`), so that the old processes still running read what the new
 * ones write. The next release removes the old fields and this file
 * (docs/operations.md, "Upgrading").
 */

/** An old field and the bytes field that replaces it. */
interface Pair {
  old: DescField;
  json: DescField;
}

/** What of a message (and of the messages in it) carries an old payload field. */
interface Plan {
  pairs: Pair[];
  nested: { field: DescField; plan: Plan }[];
}

const plans = new Map<DescMessage, Plan | null>();

/** The plan of `desc`; null when neither it nor a message in it has an old payload field. */
function planOf(desc: DescMessage, seen = new Set<DescMessage>()): Plan | null {
  const known = plans.get(desc);
  if (known !== undefined) return known;
  if (seen.has(desc)) return null;
  seen.add(desc);
  const pairs: Pair[] = [];
  const nested: Plan["nested"] = [];
  for (const field of desc.fields) {
    if (field.deprecated) {
      const json = desc.fields.find((f) => f.name === `${field.name}_json`);
      if (json) pairs.push({ old: field, json });
      continue;
    }
    const inner =
      field.fieldKind === "message" || (field.fieldKind === "list" && field.listKind === "message")
        ? field.message
        : undefined;
    if (!inner || inner.typeName.startsWith("google.protobuf.")) continue;
    const plan = planOf(inner, seen);
    if (plan) nested.push({ field, plan });
  }
  const plan = pairs.length > 0 || nested.length > 0 ? { pairs, nested } : null;
  plans.set(desc, plan);
  return plan;
}

type Fields = Record<string, unknown>;

/** Each message of `value` (a singular or repeated message field). */
function forEach(field: DescField, value: unknown, fn: (m: Fields) => void) {
  if (value === undefined || value === null) return;
  if (field.fieldKind === "list") for (const m of value as Fields[]) fn(m);
  else fn(value as Fields);
}

/** The old field's value as plain JSON (Struct fields are JsonObject already, Value are messages). */
function oldJson(pair: Pair, value: unknown): JsonValue | undefined {
  if (pair.old.fieldKind === "list") {
    const list = (value ?? []) as Value[];
    return list.length === 0 ? undefined : list.map((v) => toJson(ValueSchema, v));
  }
  if (value === undefined) return undefined;
  return pair.old.message?.typeName === "google.protobuf.Value"
    ? toJson(ValueSchema, value as Value)
    : (value as JsonObject);
}

/** The old field's value of plain JSON. */
function oldValue(pair: Pair, json: JsonValue): unknown {
  if (pair.old.fieldKind === "list") return (json as JsonValue[]).map((v) => toValue(v));
  return pair.old.message?.typeName === "google.protobuf.Value" ? toValue(json) : json;
}

function upgrade(plan: Plan, m: Fields) {
  for (const pair of plan.pairs) {
    const old = m[pair.old.localName];
    if (old === undefined || (Array.isArray(old) && old.length === 0)) continue;
    // The bytes win when both are set (a process writing both forms).
    if (!(m[pair.json.localName] as Uint8Array | undefined)?.length) {
      const json = oldJson(pair, old);
      if (json !== undefined) m[pair.json.localName] = jsonBytes(json);
    }
    // Cleared: a message passed on carries its payload once (`written` adds the old form back
    // while PIES_WRITE_LEGACY_PAYLOADS asks for it).
    m[pair.old.localName] = pair.old.fieldKind === "list" ? [] : undefined;
  }
  for (const { field, plan: inner } of plan.nested) {
    forEach(field, m[field.localName], (n) => upgrade(inner, n));
  }
}

function downgrade(plan: Plan, m: Fields) {
  for (const pair of plan.pairs) {
    const json = jsonOf((m[pair.json.localName] as Uint8Array | undefined) ?? new Uint8Array(0));
    if (json !== undefined) m[pair.old.localName] = oldValue(pair, json);
  }
  for (const { field, plan: inner } of plan.nested) {
    forEach(field, m[field.localName], (n) => downgrade(inner, n));
  }
}

/**
 * `message` with each old payload field that is set moved into its bytes (unless they are set
 * too: then the old field is dropped).
 */
export function upgradePayloads<T>(desc: DescMessage, message: T): T {
  const plan = planOf(desc);
  if (plan) upgrade(plan, message as Fields);
  return message;
}

/** `message` with each payload of bytes in its old field as well (for an old reader). */
function downgradePayloads<T>(desc: DescMessage, message: T): T {
  const plan = planOf(desc);
  if (plan) downgrade(plan, message as Fields);
  return message;
}

let writeLegacy = process.env.PIES_WRITE_LEGACY_PAYLOADS === "true";

/** For tests: writes the old payload fields too, or stops. */
export function setWriteLegacyPayloads(on: boolean) {
  writeLegacy = on;
}

/** `message` as this process writes it: with the old fields too when it writes them. */
export function written<T extends Message>(desc: DescMessage, message: T): T {
  return writeLegacy ? downgradePayloads(desc, message) : message;
}
