import { describe, expect, it } from "vitest";
import { create, fromBinary, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import { jsonBytes, upgradePayloads, type JsonValue } from "@pies/common";
import { readRunBytes } from "@pies/common/bus";
import { RunSchema, RunStatus } from "@pies/proto/runs";
import { runToRow } from "./mappers.js";
import { recordRow } from "./record-row.js";

/**
 * The record as protobuf-es decodes it (the old payload fields moved into their bytes), then
 * mapped: what recordRow must give, whichever reader read the run.
 */
const slow = (data: Uint8Array) => {
  const run = upgradePayloads(RunSchema, fromBinary(RunSchema, data));
  return { id: run.id, status: run.status, row: runToRow(run) };
};

/** The hand-written reader's row (readRunBytes), undefined where protobuf-es reads the run. */
const readRecordRow = (data: Uint8Array) => {
  const run = readRunBytes(data);
  if (!run) return undefined;
  try {
    return { id: run.id, status: run.status, row: runToRow(run) };
  } catch {
    return undefined;
  }
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
    parametersJson: jsonBytes(maybe(obj)),
    resultJson: jsonBytes(maybe(() => randomJson(rnd, 3))),
    promptJson: jsonBytes(maybe(() => randomJson(rnd, 3))),
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
      dataJson: jsonBytes(maybe(() => randomJson(rnd, 2))),
    })),
    ttl: Math.floor(rnd() * 1000) - 10,
    parentId: maybe(text) ?? "",
    cachePolicyJson: jsonBytes(maybe(obj)),
    resultSchemaJson: jsonBytes(maybe(obj)),
    cached: rnd() < 0.5,
    cachedFrom: maybe(text) ?? "",
    cacheKey: maybe(text) ?? "",
    createdAt: maybe(() => ({
      seconds: BigInt(1_700_000_000 + seed),
      nanos: Math.floor(rnd() * 1e9),
    })),
    updatedAt: maybe(() => ({ seconds: BigInt(1_800_000_000), nanos: 999_999_999 })),
    interactionStatus: maybe(text) ?? "",
    interactionPrompts: Array.from({ length: Math.floor(rnd() * 3) }, () => ({
      id: text(),
      type: rnd() < 0.3 ? "chat" : text(),
      templateId: maybe(text) ?? "",
      chatPath: maybe(text) ?? "",
    })),
    interactionUpdatedAt: maybe(() => ({ seconds: BigInt(1_750_000_000), nanos: 1_000_000 })),
    projectName: maybe(text) ?? "",
    accountName: maybe(text) ?? "",
  };
}

describe("recordRow", () => {
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
        parametersJson: jsonBytes({ text: "hello" }),
        promptJson: jsonBytes([{ role: "user", content: "Summarise hello" }]),
        resultJson: jsonBytes("a summary"),
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

  it("leaves fields it does not know to the decoder, which skips them", () => {
    const known = bytes(randomRun(7));
    const writer = new BinaryWriter();
    writer.tag(96, WireType.Varint).uint64(12);
    writer.tag(100, WireType.LengthDelimited).string("later");
    const data = new Uint8Array([...known, ...writer.finish()]);
    expect(readRecordRow(data)).toBeUndefined();
    expect(recordRow(data)).toEqual(slow(data));
    expect(recordRow(data)).toEqual(recordRow(known));
  });

  it("reads attempts by hand, and leaves to the decoder what only it reads the same way", () => {
    const withAttempts = bytes({
      id: "a",
      attempts: [{ number: 1, promptAddedJson: jsonBytes([]), tokenUse: { prompt: 1, total: 1 } }],
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
    expect(readRecordRow(withAttempts)).toEqual(slow(withAttempts));
    expect(readRecordRow(mergedConfig)).toBeUndefined();
    for (const data of [withAttempts, mergedConfig]) expect(recordRow(data)).toEqual(slow(data));
    expect(JSON.parse(recordRow(mergedConfig).row.config)).toMatchObject({
      environment: "e1",
      model: "m2",
    });
    expect(JSON.parse(recordRow(withAttempts).row.attempts) as unknown[]).toHaveLength(1);
  });

  it("rejects what the full decoder rejects: an old result without a kind", () => {
    // Field 12 (the old result) as an empty Value.
    const data = new BinaryWriter()
      .tag(12, WireType.LengthDelimited)
      .bytes(new Uint8Array())
      .finish();
    expect(readRecordRow(data)).toBeUndefined();
    expect(() => slow(data)).toThrow();
    expect(() => recordRow(data)).toThrow();
  });

  it("refuses what the decoder refuses: each such record throws (the writer keeps it aside)", () => {
    const msg = (f: (w: BinaryWriter) => void) => {
      const w = new BinaryWriter();
      f(w);
      return w.finish();
    };
    const valueOf = (f: (w: BinaryWriter) => void) =>
      msg((w) => w.tag(12, WireType.LengthDelimited).bytes(msg(f)));
    let deep = msg((v) => v.tag(4, WireType.Varint).bool(true));
    for (let i = 0; i < 50; i++) {
      const inner = deep;
      deep = msg((v) =>
        v
          .tag(6, WireType.LengthDelimited)
          .bytes(msg((l) => l.tag(1, WireType.LengthDelimited).bytes(inner))),
      );
    }
    const cases = {
      invalidUtf8: msg((w) =>
        w.tag(5, WireType.LengthDelimited).bytes(new Uint8Array([0x61, 0xff])),
      ),
      invalidUtf8InCacheKey: msg((w) =>
        w.tag(30, WireType.LengthDelimited).bytes(new Uint8Array([0xff])),
      ),
      // cache_key as a varint: the decoder reads a length and runs past the end.
      cacheKeyVarint: msg((w) => {
        w.tag(1, WireType.LengthDelimited).string("r");
        w.tag(30, WireType.Varint).uint32(3);
        w.tag(2, WireType.LengthDelimited).string("proj");
      }),
      // max_repairs length-delimited: the decoder reads a varint and then the bytes as tags.
      maxRepairsLengthDelimited: msg((w) =>
        w.tag(15, WireType.LengthDelimited).bytes(
          msg((c) => {
            c.tag(6, WireType.LengthDelimited).bytes(new Uint8Array([1, 2]));
            c.tag(2, WireType.LengthDelimited).string("m");
          }),
        ),
      ),
      // A map entry's field other than key and value: the decoder reads it as a tag.
      structEntryExtra: msg((w) =>
        w.tag(11, WireType.LengthDelimited).bytes(
          msg((s) =>
            s.tag(1, WireType.LengthDelimited).bytes(
              msg((e) => {
                e.tag(1, WireType.LengthDelimited).string("k");
                e.tag(3, WireType.Varint).uint32(5);
                e.tag(2, WireType.LengthDelimited).bytes(
                  msg((v) => v.tag(3, WireType.LengthDelimited).string("x")),
                );
              }),
            ),
          ),
        ),
      ),
      // Past the decoder's recursion limit (a repaired run nesting its answer 50 deep).
      deep: msg((w) => w.tag(12, WireType.LengthDelimited).bytes(deep)),
      // An unknown group nested past what the depth leaves.
      deepGroup: valueOf((v) => {
        for (let i = 0; i < 99; i++) v.tag(9, WireType.StartGroup);
        for (let i = 0; i < 99; i++) v.tag(9, WireType.EndGroup);
        v.tag(4, WireType.Varint).bool(true);
      }),
    };
    for (const [name, data] of Object.entries(cases)) {
      expect(() => slow(data), name).toThrow();
      expect(readRecordRow(data), name).toBeUndefined();
      expect(() => recordRow(data), name).toThrow();
    }
    // One level less is read, by both.
    const fine = bytes({
      id: "f",
      resultJson: jsonBytes(JSON.parse(`${"[".repeat(48)}true${"]".repeat(48)}`)),
    });
    expect(readRecordRow(fine)).toEqual(slow(fine));
  });

  it("agrees with the decoder on mutated records: the same row, or none where it throws", () => {
    // Records of the random corpus with bytes changed, cut short, pieces repeated, wire types
    // changed: whatever the fast reader returns must be the full decoder's row, and it returns
    // nothing for a record the decoder refuses.
    const rnd = random(20261124);
    const int = (n: number) => Math.floor(rnd() * n);
    const counts = { same: 0, fallback: 0, refused: 0 };
    for (let i = 0; i < 4000; i++) {
      const base = bytes(randomRun(i % 500));
      let data = base.slice();
      const kind = i % 5;
      if (kind === 0) for (let j = 0, n = 1 + int(3); j < n; j++) data[int(data.length)] = int(256);
      else if (kind === 1) data = base.slice(0, int(base.length));
      else if (kind === 2) {
        const from = int(base.length);
        data = new Uint8Array([...base, ...base.slice(from, from + int(base.length - from))]);
      } else if (kind === 3) data[int(data.length)]! ^= 1 << int(8);
      else {
        // A wire type changed: the low three bits of a byte that could be a tag.
        const at = int(data.length);
        data[at] = (data[at]! & ~7) | int(6);
      }
      let expected: ReturnType<typeof slow> | undefined;
      try {
        expected = slow(data);
      } catch {
        expected = undefined;
      }
      const fast = readRecordRow(data);
      if (expected === undefined) {
        expect(fast, `mutation ${i} (kind ${kind}): the decoder throws`).toBeUndefined();
        counts.refused++;
      } else if (fast === undefined) counts.fallback++;
      else {
        expect(fast, `mutation ${i} (kind ${kind})`).toEqual(expected);
        counts.same++;
      }
    }
    // Each outcome is met (else the mutations test nothing).
    expect(counts.same).toBeGreaterThan(100);
    expect(counts.refused).toBeGreaterThan(100);
  });

  it("makes NUL safe in JSON columns as runToRow does", () => {
    const data = bytes({
      id: "n",
      resultJson: jsonBytes("a\u0000b"),
      parametersJson: jsonBytes({ "k\u0000": "\\u0000" }),
    });
    const { row } = recordRow(data);
    expect(row).toEqual(slow(data).row);
    expect(JSON.parse(row.result)).toBe("a\ufffdb");
    // An escaped backslash followed by "u0000" is text, not a NUL.
    expect(JSON.parse(row.parameters)).toEqual({ "k\ufffd": "\\u0000" });
  });
});
