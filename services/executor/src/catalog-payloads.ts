import { Code, ConnectError } from "@connectrpc/connect";
import {
  jsonOf,
  pricesOf as parsePrices,
  type JsonObject,
  type JsonValue,
  type Price,
} from "@pies/common";
import { deepFreeze } from "@pies/common/server";
import type { Environment, Interaction, PromptTemplate } from "@pies/proto/catalog";

/**
 * The JSON payloads of the catalog's answers (a result schema, input schemas, an environment's
 * config), which travel as bytes of JSON text (decision 0059). The resolver keeps each answer for
 * every execution until its project changes, so each payload is parsed once, on first use, and
 * shared, frozen like the answer it belongs to.
 */
const parsed = new WeakMap<Uint8Array, JsonValue | undefined>();

function parsedOnce(bytes: Uint8Array): JsonValue | undefined {
  if (bytes.length === 0) return undefined;
  if (parsed.has(bytes)) return parsed.get(bytes);
  let value: JsonValue | undefined;
  try {
    value = deepFreeze(jsonOf(bytes));
  } catch (err) {
    throw new ConnectError(
      `the catalog answered a payload that is not JSON: ${(err as Error).message}`,
      Code.Internal,
    );
  }
  parsed.set(bytes, value);
  return value;
}

/** `bytes`' JSON object; undefined when empty, an empty object, or not an object. */
function objectOf(bytes: Uint8Array): JsonObject | undefined {
  const value = parsedOnce(bytes);
  return value &&
    typeof value === "object" &&
    !Array.isArray(value) &&
    Object.keys(value).length > 0
    ? value
    : undefined;
}

/** The JSON Schema an interaction's result must match; undefined when it has none. */
export const resultSchemaOf = (interaction: Interaction): JsonObject | undefined =>
  objectOf(interaction.resultSchemaJson);

/** The JSON Schema of the input data a template reads; undefined when it declares none. */
export const inputSchemaOf = (template: PromptTemplate): JsonObject | undefined =>
  objectOf(template.inputSchemaJson);

const NO_CONFIG: JsonObject = Object.freeze({});

/** An environment's provider settings (max_repairs, structured_output, ...); `{}` when none. */
export const configOf = (environment: Environment): JsonObject =>
  objectOf(environment.configJson) ?? NO_CONFIG;

const prices = new WeakMap<Environment, ReadonlyMap<string, Price>>();
const NO_PRICES: ReadonlyMap<string, Price> = new Map();

/** An environment's `config.prices` (the catalog checked them when it was written). */
export function pricesOf(environment: Environment): ReadonlyMap<string, Price> {
  let known = prices.get(environment);
  if (!known) {
    const parsed = parsePrices(configOf(environment));
    known = "invalid" in parsed ? NO_PRICES : parsed;
    prices.set(environment, known);
  }
  return known;
}
