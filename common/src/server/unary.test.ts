import http2 from "node:http2";
import net from "node:net";
import { queryObjects } from "node:v8";
import { create, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type ConnectRouter } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import {
  GetRunRequestSchema,
  GetRunResponseSchema,
  RunsService,
  RunStatus,
  type GetRunResponse,
} from "@pies/proto/runs";
import { Health, HealthCheckResponse_ServingStatus } from "@pies/proto/health";
import { createLogger } from "../logger.js";
import { isTooLarge } from "../retry-after.js";
import { peerTransport, peerUnavailableInterceptor, serviceClient } from "./client.js";
import { internalCredentialInterceptor } from "./internal-auth.js";
import { replayableRoutes, serveConnect, type RunningServer } from "./server.js";
import { unaryTransport } from "./unary-client.js";

// pies' internal calls: unary-client.ts against unary-server.ts (the lean Connect paths), and both
// against connect-node's (what grpc-js and other Connect clients still meet), through the servers
// and transports the processes use.

const TOKEN = "internal-test-token";
const run = {
  id: "r1",
  status: RunStatus.COMPLETED,
  parameters: { fields: { text: { kind: { case: "stringValue" as const, value: "quarterly" } } } },
  result: { kind: { case: "stringValue" as const, value: "é ✓ ".repeat(5_000) } },
  executionTime: 12n,
  tags: ["a", "b"],
};

/** What the handlers saw, for the assertions. */
const seen = {
  routesCalls: 0,
  aborted: [] as string[],
  headers: [] as Headers[],
};
let ended: (() => void) | undefined;
const handlerEnded = () => new Promise<void>((resolve) => (ended = resolve));

function routes(router: ConnectRouter) {
  seen.routesCalls++;
  // State of the service: one instance must serve both paths.
  let calls = 0;
  router.service(RunsService, {
    getRun: async (req, ctx) => {
      seen.headers.push(ctx.requestHeader);
      calls++;
      if (req.id === "missing") {
        throw new ConnectError("run missing not found", Code.NotFound, { "x-why": "gone" });
      }
      if (req.id === "boom") throw new Error("a bug with a secret in its message");
      if (req.id === "bad-header") {
        // HTTP/2 forbids connection-specific headers: the answer cannot be sent.
        ctx.responseHeader.set("connection", "keep-alive");
        return { run: { ...run, id: req.id } };
      }
      if (req.id === "wait") {
        // Until the caller goes away or the deadline passes.
        await new Promise<void>((resolve) => {
          if (ctx.signal.aborted) resolve();
          ctx.signal.addEventListener("abort", () => resolve());
        });
        seen.aborted.push(String((ctx.signal.reason as ConnectError)?.code));
        ended?.();
        throw ConnectError.from(ctx.signal.reason);
      }
      ctx.responseHeader.set("x-calls", String(calls));
      ctx.responseTrailer.set("x-trailer", "t");
      return { run: { ...run, id: req.id } };
    },
  });
}

let server: RunningServer;
let calls: RunningServer;
beforeAll(async () => {
  server = await serveConnect({
    name: "test",
    host: "127.0.0.1",
    port: 0,
    logger: createLogger("test", "silent"),
    serviceNames: [RunsService.typeName],
    isReady: async () => true,
    internalToken: TOKEN,
    routes,
  });
  calls = server;
});
afterAll(() => calls.close(100));
afterEach(() => {
  seen.aborted = [];
  seen.headers = [];
});

/** The lean client in either format (pies' peers speak binary; JSON callers are served too). */
const leanTransport = (url: string, format: "json" | "binary", token?: string) =>
  unaryTransport({
    baseUrl: url,
    useBinaryFormat: format === "binary",
    // As peerTransport's: a lost peer is UNAVAILABLE naming it.
    interceptors: [
      peerUnavailableInterceptor("runs"),
      ...(token ? [internalCredentialInterceptor(token)] : []),
    ],
    streaming: () => {
      throw new Error("no streaming here");
    },
  });

const lean = (format: "json" | "binary") =>
  serviceClient(RunsService, leanTransport(server.url, format, TOKEN));
/**
 * One GetRun call of `body` as it is, on a session of its own, with `headers` added: its status
 * and body. A call not answered in `giveUpMs` is reset (CANCEL) and fails.
 */
async function rawCall(
  url: string,
  body: string,
  contentType: string,
  { headers = {}, giveUpMs }: { headers?: http2.OutgoingHttpHeaders; giveUpMs?: number } = {},
) {
  const session = http2.connect(url);
  try {
    return await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const stream = session.request({
        ":method": "POST",
        ":path": `/${RunsService.typeName}/GetRun`,
        authorization: `Bearer ${TOKEN}`,
        "content-type": contentType,
        ...headers,
      });
      if (giveUpMs !== undefined) {
        stream.setTimeout(giveUpMs, () => {
          stream.close(http2.constants.NGHTTP2_CANCEL);
          reject(new Error(`no answer in ${giveUpMs} ms`));
        });
      }
      let status = 0;
      const chunks: Buffer[] = [];
      stream.on("response", (h) => (status = Number(h[":status"])));
      stream.on("data", (c: Buffer) => chunks.push(c));
      stream.on("end", () => resolve({ status, body: Buffer.concat(chunks).toString() }));
      stream.on("error", reject);
      stream.end(body);
    });
  } finally {
    session.close();
  }
}

/** connect-node's own Connect client (the server's connect-node path for "; charset" JSON). */
const connectNode = (contentType?: string) =>
  createClient(
    RunsService,
    createConnectTransport({
      baseUrl: server.url,
      httpVersion: "2",
      useBinaryFormat: false,
      interceptors: [
        (next) => (req) => {
          req.header.set("authorization", `Bearer ${TOKEN}`);
          if (contentType) req.header.set("content-type", contentType);
          return next(req);
        },
      ],
    }),
  );

interface Frame {
  type: number;
  stream: number;
  length: number;
  end: boolean;
}

/** A TCP proxy to `port` that parses the HTTP/2 frames each way (after the client's preface). */
async function frameProxy(port: number) {
  const sent: Frame[] = [];
  const received: Frame[] = [];
  const parser = (into: Frame[], skip: number) => {
    let buffer = Buffer.alloc(0);
    let skipped = 0;
    return (chunk: Buffer) => {
      buffer = Buffer.concat([buffer, chunk]);
      if (skipped < skip) {
        const n = Math.min(skip - skipped, buffer.length);
        buffer = buffer.subarray(n);
        skipped += n;
      }
      while (buffer.length >= 9) {
        const length = buffer.readUIntBE(0, 3);
        if (buffer.length < 9 + length) break;
        const type = buffer[3]!;
        const flags = buffer[4]!;
        const stream = buffer.readUInt32BE(5) & 0x7fffffff;
        into.push({ type, stream, length, end: type === 0 && (flags & 1) === 1 });
        buffer = buffer.subarray(9 + length);
      }
    };
  };
  const proxy = net.createServer((socket) => {
    const upstream = net.connect(port, "127.0.0.1");
    socket.on("data", parser(sent, 24));
    upstream.on("data", parser(received, 0));
    socket.pipe(upstream).pipe(socket);
    socket.on("error", () => upstream.destroy());
    upstream.on("error", () => socket.destroy());
  });
  await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(proxy.address() as net.AddressInfo).port}`,
    sent,
    received,
    close: () => proxy.close(),
  };
}

describe("internal unary calls", () => {
  it("build the services of `routes` once for both server paths", () => {
    expect(seen.routesCalls).toBe(1);
    let made = 0;
    const replay = replayableRoutes(() => made++);
    replay({} as ConnectRouter);
    replay({} as ConnectRouter);
    expect(made).toBe(1);
  });

  it("round-trip a run in JSON and in binary, with headers and trailers, on either server path", async () => {
    const clients = {
      "lean json": lean("json"),
      "lean binary": lean("binary"),
      "connect-node json": connectNode(),
      "connect-node, server's connect-node path": connectNode("application/json; charset=utf-8"),
    };
    for (const [name, client] of Object.entries(clients)) {
      let header: Headers | undefined;
      let trailer: Headers | undefined;
      const answer: GetRunResponse = await client.getRun(
        { id: `r-${name}` },
        { onHeader: (h) => (header = h), onTrailer: (t) => (trailer = t) },
      );
      expect(answer.run, name).toMatchObject({ ...run, id: `r-${name}` });
      expect(Number(header?.get("x-calls")), name).toBeGreaterThan(0);
      expect(trailer?.get("x-trailer"), name).toBe("t");
    }
    // The same service instance answered every path: its call count went up across them.
    expect(new Set(seen.headers.map((h) => h.get("authorization")))).toEqual(
      new Set([`Bearer ${TOKEN}`]),
    );
  });

  it("send the body with END_STREAM in one DATA frame, and are answered the same way", async () => {
    // A proxy that reads the HTTP/2 frames both ways: a body written and then ended separately
    // goes out as a DATA frame and an empty END_STREAM one, which wakes the peer twice.
    const proxy = await frameProxy(server.port);
    try {
      const client = serviceClient(RunsService, peerTransport(proxy.url, "runs", TOKEN));
      expect((await client.getRun({ id: "framed" })).run?.id).toBe("framed");
      const data = (frames: Frame[]) => frames.filter((f) => f.type === 0 && f.stream > 0);
      expect(data(proxy.sent)).toEqual([
        { type: 0, stream: 1, length: expect.any(Number), end: true },
      ]);
      expect(data(proxy.sent)[0]!.length).toBeGreaterThan(0);
      // The answer: its body (over the default 16 KB frame size: several frames), the last one
      // carrying END_STREAM, no empty frame after it.
      const answered = data(proxy.received);
      expect(answered.length).toBeGreaterThan(0);
      expect(answered.every((f) => f.length > 0)).toBe(true);
      expect(answered.map((f) => f.end)).toEqual([...answered.slice(1).map(() => false), true]);
    } finally {
      proxy.close();
    }
  });

  it("speak binary or JSON per method on one session when the format is chosen per method", async () => {
    const transport = unaryTransport({
      baseUrl: server.url,
      useBinaryFormat: (method) => method.parent.typeName === RunsService.typeName,
      interceptors: [internalCredentialInterceptor(TOKEN)],
      streaming: () => {
        throw new Error("no streaming here");
      },
    });
    const runs = createClient(RunsService, transport);
    const health = createClient(Health, transport);
    const { run: got } = await runs.getRun({ id: "per-method" });
    expect(got).toMatchObject({ ...run, id: "per-method" });
    expect(seen.headers.at(-1)?.get("content-type")).toBe("application/proto");
    expect((await health.check({ service: "" })).status).toBe(
      HealthCheckResponse_ServingStatus.SERVING,
    );
    const json = createClient(
      RunsService,
      unaryTransport({
        baseUrl: server.url,
        useBinaryFormat: (method) => method.parent.typeName !== RunsService.typeName,
        interceptors: [internalCredentialInterceptor(TOKEN)],
        streaming: () => {
          throw new Error("no streaming here");
        },
      }),
    );
    expect((await json.getRun({ id: "json" })).run?.id).toBe("json");
    expect(seen.headers.at(-1)?.get("content-type")).toBe("application/json");
  });

  it("carry a callee's error (code, message, metadata); an unexpected one is INTERNAL without its message", async () => {
    for (const client of [lean("json"), lean("binary"), connectNode()]) {
      const missing = await client.getRun({ id: "missing" }).catch((e: unknown) => e);
      expect(missing).toMatchObject({ code: Code.NotFound, rawMessage: "run missing not found" });
      expect((missing as ConnectError).metadata.get("x-why")).toBe("gone");
      const boom = await client.getRun({ id: "boom" }).catch((e: unknown) => e);
      expect(boom).toMatchObject({ code: Code.Internal, rawMessage: "internal error" });
    }
  });

  it("fail a call whose answer HTTP/2 refuses, and keep serving", async () => {
    const client = lean("json");
    // The stream is reset (INTERNAL_ERROR): a stream error, which callers read as their peer
    // failing (peerUnavailableInterceptor), as with connect-node's client.
    await expect(client.getRun({ id: "bad-header" })).rejects.toMatchObject({
      code: Code.Unavailable,
    });
    expect((await client.getRun({ id: "after" })).run?.id).toBe("after");
  });

  it("refuse a call without the internal token, on either server path", async () => {
    for (const contentType of ["application/json", "application/json; charset=utf-8"]) {
      const client = createClient(
        RunsService,
        createConnectTransport({
          baseUrl: server.url,
          httpVersion: "2",
          useBinaryFormat: false,
          interceptors: [
            (next) => (req) => {
              req.header.set("content-type", contentType);
              return next(req);
            },
          ],
        }),
      );
      await expect(client.getRun({ id: "r" })).rejects.toMatchObject({
        code: Code.Unauthenticated,
      });
    }
    await expect(
      serviceClient(RunsService, peerTransport(server.url, "runs")).getRun({ id: "r" }),
    ).rejects.toMatchObject({ code: Code.Unauthenticated });
  });

  it("answer a body that does not decode INVALID_ARGUMENT, and a bad timeout too", async () => {
    const session = http2.connect(server.url);
    const post = (headers: http2.OutgoingHttpHeaders, body: Uint8Array | string) =>
      new Promise<{ status: number; body: string }>((resolve, reject) => {
        const stream = session.request({
          ":method": "POST",
          ":path": `/${RunsService.typeName}/GetRun`,
          authorization: `Bearer ${TOKEN}`,
          ...headers,
        });
        let status = 0;
        const chunks: Buffer[] = [];
        stream.on("response", (h) => (status = Number(h[":status"])));
        stream.on("data", (c: Buffer) => chunks.push(c));
        stream.on("end", () => resolve({ status, body: Buffer.concat(chunks).toString() }));
        stream.on("error", reject);
        stream.end(body);
      });
    try {
      const bad = await post({ "content-type": "application/json" }, "{not json");
      expect(bad.status).toBe(400);
      expect(JSON.parse(bad.body)).toMatchObject({ code: "invalid_argument" });
      const badBinary = await post({ "content-type": "application/proto" }, "\xff\xff\xff");
      expect(JSON.parse(badBinary.body)).toMatchObject({ code: "invalid_argument" });
      const badTimeout = await post(
        { "content-type": "application/proto", "connect-timeout-ms": "soon" },
        toBinary(GetRunRequestSchema, create(GetRunRequestSchema, { id: "r" })),
      );
      expect(JSON.parse(badTimeout.body)).toMatchObject({ code: "invalid_argument" });
    } finally {
      session.close();
    }
  });

  it("ignore a JSON field the callee does not know (a newer caller), as connect-node does", async () => {
    const session = http2.connect(server.url);
    try {
      const answer = await new Promise<{ status: number; body: string }>((resolve, reject) => {
        const stream = session.request({
          ":method": "POST",
          ":path": `/${RunsService.typeName}/GetRun`,
          authorization: `Bearer ${TOKEN}`,
          // Exactly this type: the lean path's.
          "content-type": "application/json",
        });
        let status = 0;
        const chunks: Buffer[] = [];
        stream.on("response", (h) => (status = Number(h[":status"])));
        stream.on("data", (c: Buffer) => chunks.push(c));
        stream.on("end", () => resolve({ status, body: Buffer.concat(chunks).toString() }));
        stream.on("error", reject);
        stream.end(JSON.stringify({ id: "r9", fieldFromNewerVersion: 1 }));
      });
      expect(answer.status).toBe(200);
      expect(JSON.parse(answer.body)).toMatchObject({ run: { id: "r9" } });
    } finally {
      session.close();
    }
  });

  it("read only a JSON error body as a Connect error, and take a success type with parameters", async () => {
    // A peer that is not pies' server: a proxy's answers, and a JSON type with a charset.
    const answers: Record<string, { status: number; type: string; body: string }> = {
      proto404: {
        status: 404,
        type: "application/proto",
        body: JSON.stringify({ code: "permission_denied", message: "x" }),
      },
      html502: { status: 502, type: "text/html", body: "<html>bad gateway</html>" },
      json403: {
        status: 403,
        type: "application/json",
        body: JSON.stringify({ code: "permission_denied", message: "no" }),
      },
      charset: {
        status: 200,
        type: "application/json; charset=utf-8",
        body: JSON.stringify({ run: { id: "charset" } }),
      },
    };
    const other = http2.createServer();
    other.on("stream", (stream) => {
      const chunks: Buffer[] = [];
      stream.on("data", (c: Buffer) => chunks.push(c));
      stream.on("end", () => {
        const { id } = JSON.parse(Buffer.concat(chunks).toString()) as { id: string };
        const a = answers[id]!;
        stream.respond({ ":status": a.status, "content-type": a.type });
        stream.end(a.body);
      });
    });
    await new Promise<void>((resolve) => other.listen(0, "127.0.0.1", resolve));
    const client = serviceClient(
      RunsService,
      leanTransport(`http://127.0.0.1:${(other.address() as net.AddressInfo).port}`, "json"),
    );
    const failure = (id: string) =>
      client.getRun({ id }).then(
        () => undefined,
        (err: unknown) => err as ConnectError,
      );
    try {
      expect((await failure("proto404"))?.code).toBe(Code.Unimplemented);
      expect((await failure("proto404"))?.rawMessage).toBe("HTTP 404");
      // peerUnavailableInterceptor leaves an HTTP 502 as it is (no connection error in it).
      expect((await failure("html502"))?.rawMessage).toBe("HTTP 502");
      expect((await failure("json403"))?.code).toBe(Code.PermissionDenied);
      expect((await failure("json403"))?.rawMessage).toBe("no");
      expect((await client.getRun({ id: "charset" })).run?.id).toBe("charset");
    } finally {
      other.close();
    }
  });

  it("end at the deadline: the caller gets DEADLINE_EXCEEDED, the handler's signal aborts", async () => {
    // The caller's own deadline: it fails the call and resets the stream, which aborts the
    // handler's signal (CANCELED, or DEADLINE_EXCEEDED when the callee's timer fires first).
    for (const client of [lean("json"), lean("binary")]) {
      const done = handlerEnded();
      const started = Date.now();
      await expect(client.getRun({ id: "wait" }, { timeoutMs: 150 })).rejects.toMatchObject({
        code: Code.DeadlineExceeded,
      });
      expect(Date.now() - started).toBeLessThan(2_000);
      await done;
    }
    expect(seen.aborted).toHaveLength(2);
    seen.aborted = [];
    // The callee's deadline alone (the caller has none of its own, it only sends the header; a
    // caller that gives up first, after 3 s, is CANCELED): the callee answers DEADLINE_EXCEEDED
    // and its handler's signal aborts with that reason.
    for (const useBinaryFormat of [false, true]) {
      const client = createClient(
        RunsService,
        unaryTransport({
          baseUrl: server.url,
          useBinaryFormat,
          interceptors: [internalCredentialInterceptor(TOKEN)],
          streaming: () => {
            throw new Error("no streaming here");
          },
        }),
      );
      const done = handlerEnded();
      const started = Date.now();
      await expect(
        client.getRun(
          { id: "wait" },
          { headers: { "connect-timeout-ms": "150" }, signal: AbortSignal.timeout(3_000) },
        ),
      ).rejects.toMatchObject({ code: Code.DeadlineExceeded });
      expect(Date.now() - started).toBeLessThan(2_000);
      await done;
    }
    expect(seen.aborted).toEqual([String(Code.DeadlineExceeded), String(Code.DeadlineExceeded)]);
  });

  it("answer a raw call at its deadline HTTP 504 deadline_exceeded, its handler aborted", async () => {
    const done = handlerEnded();
    const started = Date.now();
    const answer = await rawCall(server.url, JSON.stringify({ id: "wait" }), "application/json", {
      headers: { "connect-timeout-ms": "120" },
      giveUpMs: 3_000,
    });
    expect(answer.status).toBe(504);
    expect(JSON.parse(answer.body)).toMatchObject({ code: "deadline_exceeded" });
    expect(Date.now() - started).toBeLessThan(2_000);
    await done;
    expect(seen.aborted).toEqual([String(Code.DeadlineExceeded)]);
  });

  it("cancel the callee's handler when the caller goes away, and answer the caller CANCELED", async () => {
    for (const client of [lean("json"), lean("binary")]) {
      const done = handlerEnded();
      const gone = new AbortController();
      const call = client.getRun({ id: "wait" }, { signal: gone.signal });
      await new Promise((r) => setTimeout(r, 100));
      gone.abort();
      await expect(call).rejects.toMatchObject({ code: Code.Canceled });
      // The handler's signal aborted: the stream was reset, not left to its deadline (45 min).
      await done;
    }
    expect(seen.aborted).toEqual([String(Code.Canceled), String(Code.Canceled)]);
  });

  it("answer a peer that is not there UNAVAILABLE naming it, and recover when it is back", async () => {
    const other = await serveConnect({
      name: "other",
      host: "127.0.0.1",
      port: 0,
      logger: createLogger("test", "silent"),
      serviceNames: [],
      isReady: async () => true,
      routes,
    });
    const port = other.port;
    const client = serviceClient(RunsService, peerTransport(other.url, "runs"));
    expect((await client.getRun({ id: "a" })).run?.id).toBe("a");
    await other.close(0);
    await expect(client.getRun({ id: "b" })).rejects.toMatchObject({
      code: Code.Unavailable,
      rawMessage: "the runs service is unavailable",
    });
    const back = await serveConnect({
      name: "back",
      host: "127.0.0.1",
      port,
      logger: createLogger("test", "silent"),
      serviceNames: [],
      isReady: async () => true,
      routes,
    });
    try {
      expect((await client.getRun({ id: "c" })).run?.id).toBe("c");
    } finally {
      await back.close(0);
    }
  });

  it("answer a peer whose process goes away during the call UNAVAILABLE naming it", async () => {
    for (const when of ["before the answer", "in the answer's body"]) {
      const dying = http2.createServer();
      const sockets = new Set<net.Socket>();
      dying.on("connection", (socket: net.Socket) => sockets.add(socket));
      dying.on("stream", (stream) => {
        stream.resume();
        stream.on("end", () => {
          if (when === "in the answer's body") {
            stream.respond({ ":status": 200, "content-type": "application/json" });
            stream.write('{"run":{"id":');
          }
          // As a process that dies: its socket closes, no reset, no GOAWAY.
          setTimeout(() => sockets.forEach((socket) => socket.destroy()), 20);
        });
      });
      await new Promise<void>((resolve) => dying.listen(0, "127.0.0.1", resolve));
      try {
        const url = `http://127.0.0.1:${(dying.address() as net.AddressInfo).port}`;
        const client = serviceClient(RunsService, peerTransport(url, "runs"));
        const err = await client.getRun({ id: "x" }).catch((e: unknown) => e);
        expect(err, when).toMatchObject({
          code: Code.Unavailable,
          rawMessage: "the runs service is unavailable",
        });
      } finally {
        dying.close();
      }
    }
  });

  it("keep no session a call found its peer down in, whatever the idle period", async () => {
    // A port nobody listens on: every call makes a session that fails to connect. Each of them,
    // with the calls queued on it, must be collectable once it has closed, not kept for the idle
    // period (5 minutes here, as peerTransport sets it).
    const probe = net.createServer();
    await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
    const port = (probe.address() as net.AddressInfo).port;
    await new Promise<void>((resolve) => probe.close(() => resolve()));
    const throwaway = http2.connect(`http://127.0.0.1:${port}`);
    throwaway.on("error", () => {});
    const sessionClass = throwaway.constructor as new () => unknown;
    await new Promise((resolve) => throwaway.once("close", resolve));
    const sessions = () => queryObjects(sessionClass, { format: "count" }) as number;
    const before = sessions();
    const client = serviceClient(RunsService, peerTransport(`http://127.0.0.1:${port}`, "runs"));
    const codes: (Code | undefined)[] = [];
    for (let i = 0; i < 10; i++) {
      // Only the codes kept: an error holds its call's stream and session through its cause.
      const batch = [1, 2, 3].map(() =>
        client.getRun({ id: "x" }).then(
          () => undefined,
          (err: unknown) => (err as ConnectError).code,
        ),
      );
      codes.push(...(await Promise.all(batch)));
    }
    expect(new Set(codes)).toEqual(new Set([Code.Unavailable]));
    // (At most the transport's current one, if its close has not been seen yet.)
    expect(sessions() - before).toBeLessThanOrEqual(1);
  });

  it("close a session idle for the idle period, ping one while it lasts, and open another", async () => {
    // A bare HTTP/2 peer that answers every call with the same run and tells its sessions.
    const peer = http2.createServer();
    const sessions: { pings: number; closed: Promise<void> }[] = [];
    peer.on("session", (session) => {
      const seen = { pings: 0, closed: new Promise<void>((r) => session.once("close", r)) };
      session.on("ping", () => seen.pings++);
      sessions.push(seen);
    });
    peer.on("stream", (stream) => {
      stream.resume();
      stream.on("end", () => {
        stream.respond({ ":status": 200, "content-type": "application/proto" });
        stream.end(
          toBinary(GetRunResponseSchema, create(GetRunResponseSchema, { run: { id: "r" } })),
        );
      });
    });
    await new Promise<void>((resolve) => peer.listen(0, "127.0.0.1", resolve));
    const url = `http://127.0.0.1:${(peer.address() as net.AddressInfo).port}`;
    try {
      const client = serviceClient(
        RunsService,
        unaryTransport({
          baseUrl: url,
          useBinaryFormat: true,
          pingIntervalMs: 20,
          idleConnectionTimeoutMs: 300,
          streaming: () => createConnectTransport({ baseUrl: url, httpVersion: "2" }),
        }),
      );
      expect((await client.getRun({ id: "a" })).run?.id).toBe("r");
      await sessions[0]!.closed;
      expect(sessions[0]!.pings).toBeGreaterThan(0);
      expect((await client.getRun({ id: "b" })).run?.id).toBe("r");
      expect(sessions).toHaveLength(2);
    } finally {
      peer.close();
    }
  });

  it("answer health checks (the probes' service) on the lean path", async () => {
    const health = createClient(Health, peerTransport(server.url, "runs", TOKEN));
    const answer = await health.check({ service: RunsService.typeName });
    expect(answer.status).toBe(HealthCheckResponse_ServingStatus.SERVING);
  });
});

describe("a request larger than readMaxBytes", () => {
  const CAP = 64 * 1024;
  let capped: RunningServer;
  let handled = 0;
  beforeAll(async () => {
    capped = await serveConnect({
      name: "capped",
      host: "127.0.0.1",
      port: 0,
      logger: createLogger("test", "silent"),
      serviceNames: [RunsService.typeName],
      isReady: async () => true,
      readMaxBytes: CAP,
      routes: (router) =>
        router.service(RunsService, {
          getRun: (req) => {
            handled++;
            return { run: { ...run, id: req.id.slice(0, 10) } };
          },
        }),
    });
  });
  afterAll(() => capped.close(100));

  /** A raw Connect POST whose body is sent as `send` says; resolves with the answer. */
  function post(
    session: http2.ClientHttp2Session,
    headers: http2.OutgoingHttpHeaders,
    send: (stream: http2.ClientHttp2Stream) => void,
  ) {
    return new Promise<{ status: number; body: string; rstCode: number | undefined }>(
      (resolve, reject) => {
        const stream = session.request({
          ":method": "POST",
          ":path": `/${RunsService.typeName}/GetRun`,
          "content-type": "application/proto",
          ...headers,
        });
        let status = 0;
        const chunks: Buffer[] = [];
        stream.on("response", (h) => (status = Number(h[":status"])));
        stream.on("data", (c: Buffer) => chunks.push(c));
        stream.on("close", () =>
          resolve({ status, body: Buffer.concat(chunks).toString(), rstCode: stream.rstCode }),
        );
        stream.on("error", (err: NodeJS.ErrnoException) => {
          // The reset that follows the answer (NO_ERROR) is not an error of the call.
          if (err.code !== "ERR_HTTP2_STREAM_ERROR") reject(err);
        });
        send(stream);
      },
    );
  }
  const tooLarge = (size?: number) =>
    size === undefined
      ? `message size is larger than configured readMaxBytes ${CAP}`
      : `message size ${size} is larger than configured readMaxBytes ${CAP}`;

  it("is RESOURCE_EXHAUSTED on the lean path, as connect-node answers it, unhandled", async () => {
    const big = "x".repeat(CAP + 1);
    const before = handled;
    for (const format of ["binary", "json"] as const) {
      const client = serviceClient(RunsService, leanTransport(capped.url, format));
      const err = await client.getRun({ id: big }).then(
        () => undefined,
        (e: unknown) => ConnectError.from(e),
      );
      expect(err?.code, format).toBe(Code.ResourceExhausted);
      expect(err?.rawMessage).toBe(tooLarge());
      // Marked as a request too large: the gateway answers 413, not 429 rate_limited.
      expect(err && isTooLarge(err), format).toBe(true);
      // Under the cap, the same call is answered.
      expect((await client.getRun({ id: "x".repeat(CAP - 100) })).run?.id).toBe("xxxxxxxxxx");
    }
    expect(handled).toBe(before + 2);
    // connect-node's path (JSON with a charset) has the same cap and the same answer.
    const viaConnectNode = createClient(
      RunsService,
      createConnectTransport({ baseUrl: capped.url, httpVersion: "2", useBinaryFormat: false }),
    );
    const err = await viaConnectNode.getRun({ id: big }).then(
      () => undefined,
      (e: unknown) => ConnectError.from(e),
    );
    expect(err?.code).toBe(Code.ResourceExhausted);
    expect(err?.rawMessage).toMatch(
      /^message size (\d+ )?is larger than configured readMaxBytes 65536$/,
    );
    expect(handled).toBe(before + 2);
  });

  it("is answered from the content-length at once, before the body is sent", async () => {
    const session = http2.connect(capped.url);
    try {
      // The body is never sent: the answer cannot have waited for it.
      const answer = await post(session, { "content-length": String(10 * CAP) }, () => {});
      expect(answer.status).toBe(429);
      expect(JSON.parse(answer.body)).toEqual({
        code: "resource_exhausted",
        message: tooLarge(10 * CAP),
      });
    } finally {
      session.close();
    }
  });

  it("is answered once the bytes pass the cap, the rest unread, the caller told to stop", async () => {
    const session = http2.connect(capped.url);
    try {
      let sent = 0;
      const answer = await post(session, {}, (stream) => {
        // Chunks past the cap and never an end: only the answer can end the call.
        const chunk = Buffer.alloc(16 * 1024, 1);
        const more = () => {
          while (!stream.destroyed && sent < 4 * CAP) {
            sent += chunk.length;
            if (!stream.write(chunk)) return void stream.once("drain", more);
          }
        };
        more();
      });
      expect(answer.status).toBe(429);
      expect(JSON.parse(answer.body)).toEqual({ code: "resource_exhausted", message: tooLarge() });
      // The stream was reset after the answer with NO_ERROR: stop sending, not a failure.
      expect(answer.rstCode).toBe(http2.constants.NGHTTP2_NO_ERROR);
      // The session still serves calls.
      const ok = await post(session, {}, (stream) =>
        stream.end(toBinary(GetRunRequestSchema, create(GetRunRequestSchema, { id: "small" }))),
      );
      expect(ok.status).toBe(200);
    } finally {
      session.close();
    }
  });
});
