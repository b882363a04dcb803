import { describe, expect, it } from "vitest";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { getTextEncoding } from "@bufbuild/protobuf/wire";
import { RunSchema } from "@pies/proto/runs";
import "./text-encoding.js";

const texts = [
  "",
  "a",
  "é ü 中文 😀",
  "lone \ud800 high",
  "lone \udc00 low",
  "\u0000",
  "x".repeat(5000),
];

describe("protobuf-es's text encoding on Buffer", () => {
  it("encodes and decodes as the Text Encoding API does", () => {
    const encoding = getTextEncoding();
    // Set (a Buffer, not the Text Encoding API's Uint8Array).
    expect(Buffer.isBuffer(encoding.encodeUtf8("a"))).toBe(true);
    const te = new TextEncoder();
    const td = new TextDecoder();
    for (const text of texts) {
      const bytes = encoding.encodeUtf8(text);
      expect(Buffer.from(bytes).equals(Buffer.from(te.encode(text))), text.slice(0, 20)).toBe(true);
      expect(encoding.decodeUtf8(bytes)).toBe(td.decode(te.encode(text)));
    }
    // A view into a larger buffer is read from its own bytes only.
    const whole = Buffer.from("xxhelloyy");
    expect(encoding.decodeUtf8(whole.subarray(2, 7))).toBe("hello");
    expect(encoding.decodeUtf8(new Uint8Array([0x61, 0xff]))).toBe(
      td.decode(new Uint8Array([0x61, 0xff])),
    );
  });

  it("still refuses invalid UTF-8 in a string field, as protobuf-es does", () => {
    const run = toBinary(RunSchema, create(RunSchema, { id: "r" }));
    expect(fromBinary(RunSchema, run).id).toBe("r");
    // Field 1 (id) holding 0x61 0xff.
    expect(() => fromBinary(RunSchema, new Uint8Array([0x0a, 0x02, 0x61, 0xff]))).toThrow();
    expect(getTextEncoding().checkUtf8("ok \ud800")).toBe(false);
  });
});
