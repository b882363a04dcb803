import { isUtf8 } from "node:buffer";
import { configureTextEncoding } from "@bufbuild/protobuf/wire";

/**
 * protobuf-es's UTF-8 conversions set to Node's Buffer rather than the Text Encoding API it uses
 * by default (its documented `configureTextEncoding`): it encodes every string field of every
 * message with a TextEncoder call, and Buffer's short-string path costs half as much (an
 * ExecuteRequest, ~15 strings: 21 → 12 µs; docs/decisions/0059-json-payloads-as-bytes.md). The
 * same bytes: lone surrogates become U+FFFD either way, and a strict decode still refuses invalid
 * UTF-8 (text-encoding.test.ts). Set once, when @pies/common is first imported.
 */
configureTextEncoding({
  encodeUtf8: (text) => Buffer.from(text, "utf8"),
  decodeUtf8(bytes, strict) {
    const buffer = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    if (strict && !isUtf8(buffer)) throw new TypeError("invalid UTF-8");
    return buffer.toString("utf8");
  },
  checkUtf8(text) {
    try {
      encodeURIComponent(text);
      return true;
    } catch {
      return false;
    }
  },
});
