import { Readable } from "node:stream";
import { brotliCompressSync, deflateSync, gzipSync } from "node:zlib";
import { EndpointPolicy, EndpointRefusedError } from "@pies/common";
import { startFakeOpenAI, type FakeOpenAI } from "@pies/testkit";
import { request, type Dispatcher } from "undici";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { decoded, guardedAgent } from "./guarded-fetch.js";

let fake: FakeOpenAI;
let loopback: Dispatcher;
let strict: Dispatcher;

beforeAll(async () => {
  fake = await startFakeOpenAI();
  loopback = guardedAgent(new EndpointPolicy("loopback"));
  strict = guardedAgent(new EndpointPolicy(""));
});
afterAll(async () => {
  await Promise.all([fake.close(), loopback.close(), strict.close()]);
});
beforeEach(() => fake.reset());

function causes(err: unknown): unknown[] {
  const all: unknown[] = [];
  for (let e = err; e && all.length < 8; e = (e as { cause?: unknown }).cause) all.push(e);
  return all;
}

const chat = JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }] });

describe("the guarded agent", () => {
  it("connects where the policy allows", async () => {
    const answer = await request(`${fake.url}/chat/completions`, {
      dispatcher: loopback,
      method: "POST",
      headers: { "content-type": "application/json" },
      body: chat,
    });
    expect(answer.statusCode).toBe(200);
    expect(((await answer.body.json()) as { object: string }).object).toBe("chat.completion");
  });

  it("refuses loopback addresses when the policy does not allow them, sending nothing", async () => {
    for (const host of ["127.0.0.1", "localhost", "[::1]"]) {
      const error = await request(`http://${host}:${fake.port}/v1/chat/completions`, {
        dispatcher: strict,
        method: "POST",
        body: chat,
      }).then(
        () => new Error("resolved"),
        (err: unknown) => err,
      );
      expect(causes(error).some((e) => e instanceof EndpointRefusedError)).toBe(true);
    }
    expect(fake.requests).toHaveLength(0);
  });
});

describe("decoded", () => {
  const text = JSON.stringify({ zipped: "yes", padding: "x".repeat(1000) });
  const read = async (stream: Readable) => {
    const chunks: Buffer[] = [];
    for await (const chunk of stream) chunks.push(chunk as Buffer);
    return Buffer.concat(chunks).toString();
  };

  it("decodes gzip, deflate and br, and passes anything else as it is", async () => {
    for (const [coding, bytes] of [
      ["gzip", gzipSync(text)],
      ["x-gzip", gzipSync(text)],
      [" GZIP ", gzipSync(text)],
      ["deflate", deflateSync(text)],
      ["br", brotliCompressSync(text)],
      [undefined, Buffer.from(text)],
      ["identity", Buffer.from(text)],
    ] as const) {
      expect(await read(decoded(coding, Readable.from([bytes])))).toBe(text);
    }
  });

  it("fails a body that is not what its encoding says", async () => {
    await expect(read(decoded("gzip", Readable.from([Buffer.from(text)])))).rejects.toThrow();
  });
});
