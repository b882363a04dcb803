import { Ajv } from "ajv";
import addFormatsModule from "ajv-formats";
import { invalid, type JsonObject } from "@pies/common";

// ajv-formats is CommonJS: under ESM its plugin is the `default` property of what is imported.
const addFormats = (addFormatsModule as unknown as { default: (ajv: Ajv) => Ajv }).default;

/** The executor's settings (strict off, formats on), so what is stored here compiles there. */
const ajv = addFormats(new Ajv({ allErrors: true, strict: false }));

/**
 * Refuses a JSON Schema that does not compile, with INVALID_ARGUMENT naming the field and what is
 * wrong: a bad schema is the writer's mistake, to be told when it is stored, not at every run.
 */
export function checkJsonSchema(field: string, schema: JsonObject | undefined): void {
  if (!schema || Object.keys(schema).length === 0) return;
  try {
    ajv.compile(schema);
  } catch (err) {
    throw invalid(`${field}: not a valid JSON Schema: ${(err as Error).message}`);
  } finally {
    // Compiled and dropped (its $id too): the executor compiles and caches its own.
    ajv.removeSchema(schema);
  }
}
