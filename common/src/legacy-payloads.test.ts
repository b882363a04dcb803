import { afterEach, describe, expect, it } from "vitest";
import { create, fromBinary, fromJson, toBinary } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import {
  ResolveExecutionResponseSchema,
  UpdateInteractionRequestSchema,
} from "@pies/proto/catalog";
import { ExecuteRequestSchema, GenerateTestDataResponseSchema } from "@pies/proto/executor";
import { RunSchema } from "@pies/proto/runs";
import { decodeStoredRun, encodeRun } from "./bus/run-binary.js";
import { jsonBytes, jsonOf } from "./json-bytes.js";
import { setWriteLegacyPayloads, upgradePayloads, written } from "./legacy-payloads.js";

// A rolling upgrade from the release before decision 0059: what it wrote (Struct/Value fields) is
// read by this one, and with PIES_WRITE_LEGACY_PAYLOADS this one writes what it reads.

const value = (json: unknown) => fromJson(ValueSchema, json as never);

/** A run as the release before wrote it: its payloads in the old fields only. */
const oldRun = () =>
  toBinary(
    RunSchema,
    create(RunSchema, {
      id: "r_old",
      parameters: { text: "fox", n: [1, null] },
      result: value({ summary: "a fox" }),
      prompt: value([{ role: "user", content: "Summarise fox" }]),
      cachePolicy: { type: "cache", ttl: 60 },
      resultSchema: { type: "object" },
      error: { code: "validation_error", message: "m", data: value({ errors: ["x"] }) },
      attempts: [{ number: 1, promptAdded: value([]), error: { code: "c", data: value(1) } }],
    }),
  );

afterEach(() => setWriteLegacyPayloads(false));

describe("the payloads of the release before", () => {
  it("are read from a stored run into their bytes", () => {
    const run = decodeStoredRun(oldRun());
    expect(jsonOf(run.parametersJson)).toEqual({ text: "fox", n: [1, null] });
    expect(jsonOf(run.resultJson)).toEqual({ summary: "a fox" });
    expect(jsonOf(run.promptJson)).toEqual([{ role: "user", content: "Summarise fox" }]);
    expect(jsonOf(run.cachePolicyJson)).toEqual({ type: "cache", ttl: 60 });
    expect(jsonOf(run.resultSchemaJson)).toEqual({ type: "object" });
    expect(jsonOf(run.error!.dataJson)).toEqual({ errors: ["x"] });
    expect(jsonOf(run.attempts[0]!.promptAddedJson)).toEqual([]);
    expect(jsonOf(run.attempts[0]!.error!.dataJson)).toEqual(1);
    // Moved, not copied.
    expect(run.parameters).toBeUndefined();
    expect(run.error!.data).toBeUndefined();
    expect(run.attempts[0]!.promptAdded).toBeUndefined();
  });

  it("leave a run of this release as it is, and the bytes win over an old field", () => {
    const run = create(RunSchema, { id: "r", resultJson: jsonBytes("new"), result: value("old") });
    expect(jsonOf(upgradePayloads(RunSchema, run).resultJson)).toBe("new");
    // The old field goes: the run is encoded with its payload once.
    expect(run.result).toBeUndefined();
    const plain = create(RunSchema, { id: "r2" });
    expect(upgradePayloads(RunSchema, plain)).toEqual(create(RunSchema, { id: "r2" }));
  });

  it("are read from an execution's request and a test-data answer", () => {
    const request = fromBinary(
      ExecuteRequestSchema,
      toBinary(ExecuteRequestSchema, create(ExecuteRequestSchema, { data: { name: "Ada" } })),
    );
    expect(jsonOf(upgradePayloads(ExecuteRequestSchema, request).dataJson)).toEqual({
      name: "Ada",
    });
    const answer = create(GenerateTestDataResponseSchema, { items: [value({ a: 1 }), value(2)] });
    expect(jsonOf(upgradePayloads(GenerateTestDataResponseSchema, answer).itemsJson)).toEqual([
      { a: 1 },
      2,
    ]);
  });

  it("are read from the catalog's answer: an interaction, its templates and its environment", () => {
    const answer = fromBinary(
      ResolveExecutionResponseSchema,
      toBinary(
        ResolveExecutionResponseSchema,
        create(ResolveExecutionResponseSchema, {
          interaction: {
            id: "i",
            testData: { name: "Ada" },
            resultSchema: { type: "object" },
            prompts: [{ template: { id: "t", inputSchema: { type: "object" } } }],
          },
          environment: { id: "e", config: { max_repairs: 1 } },
        }),
      ),
    );
    const { interaction, environment } = upgradePayloads(ResolveExecutionResponseSchema, answer);
    expect(jsonOf(interaction!.testDataJson)).toEqual({ name: "Ada" });
    expect(jsonOf(interaction!.resultSchemaJson)).toEqual({ type: "object" });
    expect(jsonOf(interaction!.prompts[0]!.template!.inputSchemaJson)).toEqual({ type: "object" });
    expect(jsonOf(environment!.configJson)).toEqual({ max_repairs: 1 });
    expect(interaction!.resultSchema).toBeUndefined();
    expect(environment!.config).toBeUndefined();
  });

  it("keep an update's meaning: unset keeps the value, an empty object clears it", () => {
    const update = (interaction: object) =>
      upgradePayloads(
        UpdateInteractionRequestSchema,
        fromBinary(
          UpdateInteractionRequestSchema,
          toBinary(
            UpdateInteractionRequestSchema,
            create(UpdateInteractionRequestSchema, { id: "i", interaction }),
          ),
        ),
      ).interaction!;
    expect(update({ description: "d" }).resultSchemaJson).toBeUndefined();
    expect(jsonOf(update({ resultSchema: {} }).resultSchemaJson!)).toEqual({});
  });
});

describe("PIES_WRITE_LEGACY_PAYLOADS", () => {
  const run = () =>
    create(RunSchema, {
      id: "r_new",
      parametersJson: jsonBytes({ text: "fox" }),
      resultJson: jsonBytes(["a", 1]),
      error: { code: "c", dataJson: jsonBytes(null) },
    });

  it("off: a run is written with its bytes only", () => {
    const decoded = fromBinary(RunSchema, encodeRun(run()));
    expect(decoded.parameters).toBeUndefined();
    expect(decoded.result).toBeUndefined();
    expect(decoded.$unknown).toBeUndefined();
  });

  it("on: a run is written with the old fields too, as the release before reads them", () => {
    setWriteLegacyPayloads(true);
    const decoded = fromBinary(RunSchema, encodeRun(run()));
    // What the release before reads: the old fields.
    expect(decoded.parameters).toEqual({ text: "fox" });
    expect(decoded.result).toEqual(value(["a", 1]));
    expect(decoded.error!.data).toEqual(value(null));
    // And this release still reads its bytes.
    expect(jsonOf(decoded.resultJson)).toEqual(["a", 1]);
  });

  it("on: the catalog's answers and writes carry the old fields too", () => {
    setWriteLegacyPayloads(true);
    const answer = written(
      ResolveExecutionResponseSchema,
      create(ResolveExecutionResponseSchema, {
        interaction: {
          resultSchemaJson: jsonBytes({ type: "object" }),
          prompts: [{ template: { inputSchemaJson: jsonBytes({ type: "object" }) } }],
        },
        environment: { configJson: jsonBytes({ structured_output: false }) },
      }),
    );
    const decoded = fromBinary(
      ResolveExecutionResponseSchema,
      toBinary(ResolveExecutionResponseSchema, answer),
    );
    expect(decoded.interaction!.resultSchema).toEqual({ type: "object" });
    expect(decoded.interaction!.testData).toBeUndefined();
    expect(decoded.interaction!.prompts[0]!.template!.inputSchema).toEqual({ type: "object" });
    expect(decoded.environment!.config).toEqual({ structured_output: false });
    // A clearing update reads as one to the release before: an empty Struct.
    const update = written(
      UpdateInteractionRequestSchema,
      create(UpdateInteractionRequestSchema, { interaction: { testDataJson: jsonBytes({}) } }),
    );
    expect(update.interaction!.testData).toEqual({});
    expect(update.interaction!.resultSchema).toBeUndefined();
  });
});
