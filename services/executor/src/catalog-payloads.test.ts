import { describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { jsonBytes } from "@pies/common";
import { EnvironmentSchema, InteractionSchema, PromptTemplateSchema } from "@pies/proto/catalog";
import { configOf, inputSchemaOf, resultSchemaOf } from "./catalog-payloads.js";

describe("the catalog's payloads, as the executor reads them", () => {
  it("parses each once, into one frozen value shared by every execution of the answer", () => {
    const interaction = create(InteractionSchema, {
      resultSchemaJson: jsonBytes({ type: "object", properties: { a: { type: "string" } } }),
    });
    const first = resultSchemaOf(interaction);
    expect(first).toEqual({ type: "object", properties: { a: { type: "string" } } });
    expect(resultSchemaOf(interaction)).toBe(first);
    expect(Object.isFrozen(first)).toBe(true);
    expect(Object.isFrozen(first!.properties)).toBe(true);
    // Other bytes of the same text (another answer): parsed for themselves.
    const again = create(InteractionSchema, { resultSchemaJson: jsonBytes(first) });
    expect(resultSchemaOf(again)).not.toBe(first);
  });

  it("reads an absent, empty or non-object schema as none, and a config as {} when absent", () => {
    const schema = (value: unknown) =>
      resultSchemaOf(create(InteractionSchema, { resultSchemaJson: jsonBytes(value) }));
    expect(schema(undefined)).toBeUndefined();
    expect(schema({})).toBeUndefined();
    expect(schema([1])).toBeUndefined();
    expect(schema(null)).toBeUndefined();
    expect(inputSchemaOf(create(PromptTemplateSchema, {}))).toBeUndefined();
    expect(
      inputSchemaOf(
        create(PromptTemplateSchema, { inputSchemaJson: jsonBytes({ type: "object" }) }),
      ),
    ).toEqual({ type: "object" });
    expect(configOf(create(EnvironmentSchema, {}))).toEqual({});
    expect(
      configOf(create(EnvironmentSchema, { configJson: jsonBytes({ max_repairs: 2 }) }))
        .max_repairs,
    ).toBe(2);
  });

  it("answers INTERNAL for bytes that are not JSON (the catalog's fault, not the caller's)", () => {
    const environment = create(EnvironmentSchema, {
      configJson: new TextEncoder().encode("{not json"),
    });
    let error: unknown;
    try {
      configOf(environment);
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(ConnectError);
    expect((error as ConnectError).code).toBe(Code.Internal);
  });
});
