import { Code, ConnectError, createClient, createRouterTransport } from "@connectrpc/connect";
import type { ConnectRouter, Transport } from "@connectrpc/connect";
import { RunsService } from "@pies/proto/runs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { peerTransport } from "./server/client.js";
import { directTransport } from "./server/direct.js";
import { createLogger } from "./logger.js";
import { retryableError, retryAfterSeconds } from "./retry-after.js";
import { serveConnect, type RunningServer } from "./server/server.js";

// A service that is over its limit: every call asks to be tried again in 2 s.
const routes = (router: ConnectRouter) =>
  router.service(RunsService, {
    getRun() {
      throw retryableError("busy", Code.ResourceExhausted, 2);
    },
  });

let server: RunningServer;
beforeAll(async () => {
  server = await serveConnect({
    name: "retry-after-test",
    host: "127.0.0.1",
    port: 0,
    logger: createLogger("test", "silent"),
    routes,
    serviceNames: [RunsService.typeName],
    isReady: async () => true,
  });
});
afterAll(async () => {
  await server?.close(1000);
});

async function callError(transport: Transport): Promise<ConnectError> {
  const err = await createClient(RunsService, transport)
    .getRun({ projectId: "p", id: "r" })
    .then(
      () => undefined,
      (e: unknown) => e,
    );
  expect(err).toBeInstanceOf(ConnectError);
  return err as ConnectError;
}

describe("retry-after on Connect errors", () => {
  it("reaches the caller over HTTP/2 (the four processes), in memory and in process (the embedded mode, the edge)", async () => {
    for (const transport of [
      peerTransport(server.url),
      createRouterTransport(routes),
      directTransport(routes),
    ]) {
      const err = await callError(transport);
      expect(err.code).toBe(Code.ResourceExhausted);
      expect(err.rawMessage).toBe("busy");
      expect(retryAfterSeconds(err)).toBe(2);
    }
  });

  it("rounds a fraction up to whole seconds, at least 1", () => {
    expect(retryAfterSeconds(retryableError("x", Code.Unavailable, 2.1))).toBe(3);
    expect(retryAfterSeconds(retryableError("x", Code.Unavailable, 0))).toBe(1);
  });

  it("reads no retry-after from an error without one, or with one that is not whole seconds", () => {
    expect(retryAfterSeconds(new ConnectError("x", Code.ResourceExhausted))).toBeUndefined();
    for (const value of ["soon", "-1", "1.5", "Wed, 21 Oct 2026 07:28:00 GMT", ""]) {
      const err = new ConnectError("x", Code.Unavailable, new Headers({ "retry-after": value }));
      expect(retryAfterSeconds(err)).toBeUndefined();
    }
  });
});
