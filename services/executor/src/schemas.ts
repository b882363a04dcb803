import { Ajv, type ErrorObject, type ValidateFunction } from "ajv";
import addFormatsModule from "ajv-formats";
import { LRUCache } from "lru-cache";
import type { JsonObject } from "@pies/common";
import type { Interaction } from "@pies/proto/catalog";
import { inputSchemaOf } from "./catalog-payloads.js";

// ajv-formats is CommonJS: under ESM its plugin is the `default` property of what is imported.
const addFormats = (addFormatsModule as unknown as { default: (ajv: Ajv) => Ajv }).default;

export class SchemaError extends Error {}

/** Compiles JSON Schemas once (by their text) and validates against them. */
export class SchemaValidator {
  private readonly ajv = new Ajv({ allErrors: true, strict: false });
  /** By the schema's text; the least recently used go past 1,000. */
  private readonly cache = new LRUCache<string, ValidateFunction>({ max: 1000 });

  constructor() {
    addFormats(this.ajv);
  }

  /** Compiles (and caches) a schema; throws SchemaError when it is not a valid JSON Schema. */
  compile(schema: JsonObject): ValidateFunction {
    const key = JSON.stringify(schema);
    let validate = this.cache.get(key);
    if (!validate) {
      try {
        validate = this.ajv.compile(schema);
      } catch (err) {
        throw new SchemaError(`invalid JSON Schema: ${(err as Error).message}`);
      }
      this.cache.set(key, validate);
    }
    return validate;
  }

  /** The validation errors of `value` (empty when it is valid). */
  errors(schema: JsonObject, value: unknown): string[] {
    return this.check(schema, value).map(formatError);
  }

  /** ajv's errors of `value` (empty when it is valid). */
  check(schema: JsonObject, value: unknown): ErrorObject[] {
    const validate = this.compile(schema);
    return validate(value) ? [] : (validate.errors ?? []);
  }
}

export function formatError(e: ErrorObject): string {
  return `${e.instancePath || "/"} ${e.message ?? "is invalid"}`;
}

/**
 * The input schema of an interaction: the union of its templates' input schemas (properties and
 * required), or undefined when no template declares one.
 */
export function mergedInputSchema(interaction: Interaction): JsonObject | undefined {
  const schemas = interaction.prompts
    .map((p) => p.template && inputSchemaOf(p.template))
    .filter((s): s is JsonObject => s !== undefined);
  if (schemas.length === 0) return undefined;
  if (schemas.length === 1) return schemas[0];
  const properties: JsonObject = {};
  const required = new Set<string>();
  for (const s of schemas) {
    Object.assign(properties, (s.properties as JsonObject | undefined) ?? {});
    for (const r of (s.required as string[] | undefined) ?? []) required.add(r);
  }
  return { type: "object", properties, required: [...required] };
}
