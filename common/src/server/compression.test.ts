import { jsonBytes, jsonOf } from "../json-bytes.js";
import http2 from "node:http2";
import { create, toBinary } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RunsService, GetRunRequestSchema } from "@pies/proto/runs";
import { createLogger } from "../logger.js";
import { peerTransport, serviceClient } from "./client.js";
import { serveConnect, type RunningServer } from "./server.js";

// Internal calls are not compressed: answers of a few KB cost more to gzip than to send.
let server: RunningServer;
const prompt = "Summarise the quarterly report. ".repeat(100);

beforeAll(async () => {
  server = await serveConnect({
    name: "test",
    host: "127.0.0.1",
    port: 0,
    logger: createLogger("test", "silent"),
    serviceNames: [],
    isReady: async () => true,
    routes: (router) =>
      router.service(RunsService, {
        getRun: async (req) => ({
          run: { id: req.id, promptJson: jsonBytes(prompt) },
        }),
      }),
  });
});

afterAll(() => server.close());

describe("internal calls", () => {
  it("get answers uncompressed even from a client that accepts gzip", async () => {
    const session = http2.connect(server.url);
    try {
      const headers = await new Promise<http2.IncomingHttpHeaders>((resolve, reject) => {
        const stream = session.request({
          ":method": "POST",
          ":path": `/${RunsService.typeName}/GetRun`,
          "content-type": "application/proto",
          "accept-encoding": "gzip, br",
        });
        stream.on("response", resolve);
        stream.on("error", reject);
        stream.resume();
        stream.end(toBinary(GetRunRequestSchema, create(GetRunRequestSchema, { id: "r1" })));
      });
      expect(headers[":status"]).toBe(200);
      expect(headers["content-encoding"]).toBeUndefined();
    } finally {
      session.close();
    }
  });

  it("are answered in full through the peer transport", async () => {
    const client = serviceClient(RunsService, peerTransport(server.url, "runs"));
    const { run } = await client.getRun({ id: "r2" });
    expect(jsonOf(run!.promptJson)).toBe(prompt);
  });
});
