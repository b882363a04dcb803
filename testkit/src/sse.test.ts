import { describe, expect, it } from "vitest";
import { parseSse, readSseIncrementally, type SseEvent } from "./sse.js";

const body = [
  ": heartbeat",
  "",
  "id: 1",
  'data: "a"',
  "",
  ": a comment inside a block\r",
  "event: message\r",
  "id: 2\r",
  'data: "b"\r',
  "",
  "retry: 1000",
  "",
  "event: close",
  "data: {",
  "data: }",
  "",
  "",
].join("\n");

const expected: SseEvent[] = [
  { event: "message", id: "1", data: '"a"' },
  { event: "message", id: "2", data: '"b"' },
  { event: "message", data: "" },
  { event: "close", data: "{\n}" },
];

/** The body as a stream of byte chunks of `size` bytes, cutting events (and characters) anywhere. */
async function* chunked(text: string, size: number): AsyncIterable<Uint8Array> {
  const bytes = new TextEncoder().encode(text);
  for (let i = 0; i < bytes.length; i += size) yield bytes.slice(i, i + size);
}

describe("the SSE parser", () => {
  it("reads events, skipping heartbeats and comments, with LF or CRLF lines", () => {
    expect(parseSse(body)).toEqual(expected);
  });

  it("reads the same events incrementally, however the body is cut", async () => {
    for (const size of [1, 3, 7, 1000]) {
      const events: SseEvent[] = [];
      await readSseIncrementally(chunked(body, size), (event) => events.push(event));
      expect(events).toEqual(expected);
    }
  });

  it("takes a last event that no blank line ends", async () => {
    const events: SseEvent[] = [];
    await readSseIncrementally(chunked("event: close\ndata: done", 4), (e) => events.push(e));
    expect(events).toEqual([{ event: "close", data: "done" }]);
    expect(parseSse("event: close\ndata: done")).toEqual(events);
  });
});
