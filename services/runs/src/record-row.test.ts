import { describe, expect, it } from "vitest";
import { create, fromBinary, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import { toValue, type JsonValue } from "@pies/common";
import { RunSchema, RunStatus } from "@pies/proto/runs";
import { runToRow } from "./mappers.js";
import { readFields, readRecordRow, recordRow, unreadFields } from "./record-row.js";

/** What the record writer stored before the fast reader: the message decoded, then mapped. */
const slow = (data: Uint8Array) => {
  const run = fromBinary(RunSchema, data);
  return { id: run.id, status: run.status, row: runToRow(run) };
};

const bytes = (init: MessageInitShape<typeof RunSchema>) =>
  toBinary(RunSchema, create(RunSchema, init));

/** A small deterministic generator, so a failure names a run that can be made again. */
function random(seed: number) {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

const awkward = [
  "",
  "a",
  "Summarise ${text}",
  "\u0000",
  "nul\u0000inside",
  "é ü 中文 😀",
  '"\\',
  "\n\t",
];

function randomJson(rnd: () => number, depth: number): JsonValue {
  const pick = rnd();
  if (depth <= 0 || pick < 0.45) {
    const leaf = Math.floor(rnd() * 7);
    if (leaf === 0) return null;
    if (leaf === 1) return rnd() < 0.5;
    if (leaf === 2) return Math.floor(rnd() * 2000) - 1000;
    if (leaf === 3) return rnd() * 1e6 - 5e5;
    return awkward[Math.floor(rnd() * awkward.length)]! + String(Math.floor(rnd() * 100));
  }
  const n = Math.floor(rnd() * 4);
  if (pick < 0.7) return Array.from({ length: n }, () => randomJson(rnd, depth - 1));
  const obj: Record<string, JsonValue> = {};
  // Keys that look like integers too: a JS object puts those first, whatever the wire order.
  for (let i = 0; i < n; i++)
    obj[rnd() < 0.3 ? String(Math.floor(rnd() * 20)) : `k${Math.floor(rnd() * 50)}`] = randomJson(
      rnd,
      depth - 1,
    );
  return obj;
}

function randomRun(seed: number): MessageInitShape<typeof RunSchema> {
  const rnd = random(seed);
  const maybe = <T>(v: () => T): T | undefined => (rnd() < 0.5 ? v() : undefined);
  const text = () => awkward[Math.floor(rnd() * awkward.length)]! + String(seed);
  const obj = () => {
    const v = randomJson(rnd, 3);
    return v !== null && typeof v === "object" && !Array.isArray(v) ? v : { v };
  };
  return {
    id: `run_${seed}`,
    projectId: text(),
    accountId: text(),
    interactionId: text(),
    interactionName: text(),
    environmentId: text(),
    environmentName: text(),
    provider: text(),
    modelId: text(),
    status: Math.floor(rnd() * 6) as RunStatus,
    stream: rnd() < 0.5,
    parameters: maybe(obj),
    result: maybe(() => toValue(randomJson(rnd, 3))),
    prompt: maybe(() => toValue(randomJson(rnd, 3))),
    tags: Array.from({ length: Math.floor(rnd() * 3) }, text),
    config: maybe(() => ({
      environmentId: text(),
      model: text(),
      formatter: text(),
      temperature: maybe(() => rnd()),
      maxTokens: maybe(() => Math.floor(rnd() * 4000)),
      maxRepairs: maybe(() => 2),
    })),
    source: maybe(() => ({ type: text(), label: text(), clientIp: text() })),
    tokenUse: maybe(() => ({ prompt: 1, result: Math.floor(rnd() * 100), total: 300 })),
    executionTime: maybe(() => BigInt(Math.floor(rnd() * 1e9))),
    error: maybe(() => ({
      code: text(),
      message: text(),
      data: maybe(() => toValue(randomJson(rnd, 2))),
    })),
    ttl: Math.floor(rnd() * 1000) - 10,
    parentId: maybe(text) ?? "",
    cachePolicy: maybe(obj),
    resultSchema: maybe(obj),
    cached: rnd() < 0.5,
    cachedFrom: maybe(text) ?? "",
    cacheKey: maybe(text) ?? "",
    createdAt: maybe(() => ({
      seconds: BigInt(1_700_000_000 + seed),
      nanos: Math.floor(rnd() * 1e9),
    })),
    updatedAt: maybe(() => ({ seconds: BigInt(1_800_000_000), nanos: 999_999_999 })),
  };
}

describe("recordRow", () => {
  it("reads every Run field that is stored, and knows which are not", () => {
    // A field added to Run must be read here (or said not to be stored): this fails until it is.
    const numbers = RunSchema.fields.map((f) => f.number).sort((a, b) => a - b);
    expect([...readFields, ...unreadFields].sort((a, b) => a - b)).toEqual(numbers);
  });

  it("gives the columns that decoding and runToRow give, on 500 random runs", () => {
    for (let seed = 0; seed < 500; seed++) {
      const data = bytes(randomRun(seed));
      const fast = readRecordRow(data);
      expect(fast, `run ${seed} took the full decoder`).toBeDefined();
      expect(fast, `run ${seed}`).toEqual(slow(data));
    }
  });

  it("gives the same columns for the bench's record and for an empty run", () => {
    for (const init of [
      {},
      {
        id: "run_1",
        projectId: "p",
        status: RunStatus.COMPLETED,
        parameters: { text: "hello" },
        prompt: toValue([{ role: "user", content: "Summarise hello" }]),
        result: toValue("a summary"),
        config: { environmentId: "e", model: "m", formatter: "", temperature: 0 },
        tokenUse: { prompt: 0, result: 0, total: 0 },
        executionTime: 0n,
        createdAt: { seconds: 0n, nanos: 0 },
      },
    ]) {
      const data = bytes(init);
      expect(readRecordRow(data)).toEqual(slow(data));
    }
  });

  it("skips fields it does not know, as the decoder does", () => {
    const known = bytes(randomRun(7));
    const writer = new BinaryWriter();
    writer.tag(31, WireType.Varint).uint64(12);
    writer.tag(40, WireType.LengthDelimited).string("later");
    const data = new Uint8Array([...known, ...writer.finish()]);
    expect(readRecordRow(data)).toEqual(slow(data));
  });

  it("leaves to the full decoder what only it handles the same way", () => {
    const withAttempts = bytes({
      id: "a",
      attempts: [{ number: 1, promptAdded: toValue([]), tokenUse: { prompt: 1, total: 1 } }],
    });
    // A second config is merged into the first by the decoder.
    const w = new BinaryWriter();
    w.tag(15, WireType.LengthDelimited).bytes(
      new BinaryWriter().tag(1, WireType.LengthDelimited).string("e1").finish(),
    );
    w.tag(15, WireType.LengthDelimited).bytes(
      new BinaryWriter().tag(2, WireType.LengthDelimited).string("m2").finish(),
    );
    const mergedConfig = w.finish();
    for (const data of [withAttempts, mergedConfig]) {
      expect(readRecordRow(data)).toBeUndefined();
      expect(recordRow(data)).toEqual(slow(data));
    }
    expect(JSON.parse(recordRow(mergedConfig).row.config)).toMatchObject({
      environment: "e1",
      model: "m2",
    });
    expect(JSON.parse(recordRow(withAttempts).row.attempts) as unknown[]).toHaveLength(1);
  });

  it("rejects what runToRow rejects: a result without a kind", () => {
    // Field 12 (result) as an empty Value.
    const data = new BinaryWriter()
      .tag(12, WireType.LengthDelimited)
      .bytes(new Uint8Array())
      .finish();
    expect(readRecordRow(data)).toBeUndefined();
    expect(() => slow(data)).toThrow();
    expect(() => recordRow(data)).toThrow();
  });

  it("stores invalid UTF-8 as U+FFFD where the decoder would throw for ever", () => {
    const data = new BinaryWriter()
      .tag(1, WireType.LengthDelimited)
      .string("r")
      .tag(5, WireType.LengthDelimited)
      .bytes(new Uint8Array([0x61, 0xff, 0x62]))
      .finish();
    expect(() => fromBinary(RunSchema, data)).toThrow();
    expect(recordRow(data).row.interaction_name).toBe("a\ufffdb");
  });

  it("makes NUL safe in JSON columns as runToRow does", () => {
    const data = bytes({
      id: "n",
      result: toValue("a\u0000b"),
      parameters: { "k\u0000": "\\u0000" },
    });
    const { row } = recordRow(data);
    expect(row).toEqual(slow(data).row);
    expect(JSON.parse(row.result)).toBe("a\ufffdb");
    // An escaped backslash followed by "u0000" is text, not a NUL.
    expect(JSON.parse(row.parameters)).toEqual({ "k\ufffd": "\\u0000" });
  });
});
