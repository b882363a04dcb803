import { connect, type AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseSse } from "@pies/testkit";
import { startTestPies, type TestPies } from "../test/in-memory-pies.js";

// The gateway on a real port, with short timeouts: what Node's HTTP layer does before (or
// instead of) Fastify is only seen over a socket, never with inject.
const HEADERS_TIMEOUT_MS = 500;
const REQUEST_TIMEOUT_MS = 1500;

let pies: TestPies;
let port: number;
let base: string;

beforeAll(async () => {
  pies = await startTestPies({
    gateway: {
      authCacheSeconds: 30,
      headersTimeoutMs: HEADERS_TIMEOUT_MS,
      requestTimeoutMs: REQUEST_TIMEOUT_MS,
      // As in production (1 MB): the slow body below is within the limit.
      maxBodyBytes: 1024 * 1024,
    },
  });
  await pies.app.listen({ host: "127.0.0.1", port: 0 });
  port = (pies.app.server.address() as AddressInfo).port;
  base = `http://127.0.0.1:${port}/api/v1`;
}, 30_000);

afterAll(async () => pies?.close());

interface RawResponse {
  status: number;
  headers: string;
  body: string;
  /** Milliseconds from connecting until the server closed the connection. */
  ms: number;
}

/**
 * Sends `head` on a new connection, then each of `drip` one at a time every `everyMs`, and
 * collects everything until the server closes the connection (at most `limitMs`).
 */
function raw(head: string, drip: string[] = [], everyMs = 0, limitMs = 10_000) {
  return new Promise<RawResponse>((resolve, reject) => {
    const started = Date.now();
    const socket = connect(port, "127.0.0.1");
    let received = "";
    const timers: NodeJS.Timeout[] = [];
    const giveUp = setTimeout(() => {
      socket.destroy();
      reject(new Error(`the server kept the connection open for ${limitMs} ms: ${received}`));
    }, limitMs);
    socket.on("connect", () => {
      socket.write(head);
      drip.forEach((bytes, i) =>
        timers.push(setTimeout(() => socket.writable && socket.write(bytes), (i + 1) * everyMs)),
      );
    });
    socket.on("data", (chunk) => (received += chunk.toString()));
    // A reset after the answer is fine: the server closed a connection it no longer reads.
    socket.on("error", () => {});
    socket.on("close", () => {
      clearTimeout(giveUp);
      timers.forEach(clearTimeout);
      const [headers = "", body = ""] = received.split("\r\n\r\n");
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(headers)?.[1] ?? 0);
      resolve({ status, headers, body, ms: Date.now() - started });
    });
  });
}

const shape = (status: number, code: string) => ({
  error: expect.any(String),
  status,
  code,
  message: expect.any(String),
});

describe("slow clients (slowloris)", () => {
  it("cuts a request whose body trickles in, with a 408 in pies' shape", async () => {
    // With a valid key: a request without one is refused (401) before its body is read.
    const head =
      "POST /api/v1/runs HTTP/1.1\r\nHost: pies\r\ncontent-type: application/json\r\n" +
      `authorization: Bearer ${pies.key}\r\ncontent-length: 1000000\r\n\r\n`;
    const response = await raw(head, Array(40).fill("{"), 200);
    expect(response.ms).toBeLessThan(REQUEST_TIMEOUT_MS + 1500);
    expect(response.status).toBe(408);
    expect(JSON.parse(response.body)).toEqual(shape(408, "request_timeout"));
  });

  it("cuts a request whose headers trickle in", async () => {
    const response = await raw("GET /healthz HTTP/1.1\r\n", Array(40).fill("x"), 100);
    expect(response.ms).toBeLessThan(HEADERS_TIMEOUT_MS + 1500);
    expect(response.status).toBe(408);
    expect(JSON.parse(response.body)).toEqual(shape(408, "request_timeout"));
  });

  it("does not cut an SSE stream that lasts longer than the request timeout", async () => {
    const post = async (url: string, payload: object) =>
      (
        await fetch(`${base}${url}`, {
          method: "POST",
          headers: { authorization: `Bearer ${pies.key}`, "content-type": "application/json" },
          body: JSON.stringify(payload),
        })
      ).json() as Promise<any>;
    const prompt = await post("/prompts", { content: "Hello", content_type: "text" });
    const interaction = await post("/interactions", {
      name: "slow",
      model: `test-latency-${REQUEST_TIMEOUT_MS + 2000}`,
      environment: pies.environmentId,
      prompts: [{ template: prompt.id }],
    });
    const run = await post("/runs", { interaction: interaction.id, stream: true });
    expect(run).toMatchObject({ status: "created" });
    const started = Date.now();
    const stream = await fetch(`${base}/runs/${run.id}/stream`, {
      headers: { authorization: `Bearer ${pies.key}` },
    });
    const events = parseSse(await stream.text());
    expect(Date.now() - started).toBeGreaterThan(REQUEST_TIMEOUT_MS + 1000);
    expect(events.at(-1)!.event).toBe("close");
    expect(JSON.parse(events.at(-1)!.data)).toMatchObject({ status: "completed" });
  }, 20_000);
});

describe("errors of the HTTP layer, in pies' shape", () => {
  it("400: a request that is not HTTP", async () => {
    const response = await raw("NOT HTTP AT ALL\r\n\r\n");
    expect(response.status).toBe(400);
    expect(response.headers).toMatch(/content-type: application\/json/i);
    expect(JSON.parse(response.body)).toEqual(shape(400, "invalid_request"));
  });

  it("400: a bad Content-Length", async () => {
    const response = await raw(
      "POST /api/v1/runs HTTP/1.1\r\nHost: pies\r\ncontent-length: nope\r\n\r\n",
    );
    expect(response.status).toBe(400);
    expect(JSON.parse(response.body)).toEqual(shape(400, "invalid_request"));
  });

  it("431: headers too large", async () => {
    const response = await raw(
      `GET /healthz HTTP/1.1\r\nHost: pies\r\nx-big: ${"a".repeat(20_000)}\r\n\r\n`,
    );
    expect(response.status).toBe(431);
    expect(JSON.parse(response.body)).toEqual(shape(431, "headers_too_large"));
  });

  it("413, 414 and 415 over a real connection", async () => {
    const auth = { authorization: `Bearer ${pies.key}` };
    const big = await fetch(`${base}/prompts`, {
      method: "POST",
      headers: { ...auth, "content-type": "application/json" },
      body: JSON.stringify({ content: "x".repeat(1100 * 1024) }),
    });
    expect(big.status).toBe(413);
    expect(await big.json()).toEqual(shape(413, "payload_too_large"));
    const long = await fetch(`${base}/runs/${"a".repeat(5000)}`, { headers: auth });
    expect(long.status).toBe(414);
    expect(await long.json()).toEqual(shape(414, "uri_too_long"));
    const text = await fetch(`${base}/prompts`, {
      method: "POST",
      headers: { ...auth, "content-type": "text/plain" },
      body: "hello",
    });
    expect(text.status).toBe(415);
    expect(await text.json()).toEqual(shape(415, "unsupported_media_type"));
  });
});
