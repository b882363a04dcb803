import type { GenEnum } from "@bufbuild/protobuf/codegenv2";

/** The lower-case names of an enum's values, as the REST API and the database spell them. */
export interface EnumNames<E extends number> {
  /** The names in declaration order, without the unspecified (zero) value. */
  readonly names: readonly [string, ...string[]];
  /** The name of a value; undefined for the unspecified value or a number the enum lacks. */
  name(value: E): string | undefined;
  /** The value of a name; undefined for any other string (including the unspecified value's). */
  value(name: string): E | undefined;
}

/**
 * Name ↔ value mappings of a generated enum, read from its descriptor so that a value added to the
 * .proto needs no table: `RUN_STATUS_COMPLETED` is `completed`. The prefix removed is the one all
 * values share (`RUN_STATUS_`), as protobuf-es computes it.
 */
export function enumNames<E extends number>(schema: GenEnum<E>): EnumNames<E> {
  const prefix = schema.sharedPrefix ?? "";
  const byValue = new Map<number, string>();
  const byName = new Map<string, E>();
  for (const v of schema.values) {
    if (v.number === 0) continue;
    const name = v.name.slice(prefix.length).toLowerCase();
    byValue.set(v.number, name);
    byName.set(name, v.number as E);
  }
  const names = [...byName.keys()];
  if (names.length === 0) throw new Error(`enum ${schema.typeName} has no specified values`);
  return {
    names: names as [string, ...string[]],
    name: (value) => byValue.get(value),
    value: (name) => byName.get(name),
  };
}
