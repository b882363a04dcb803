import { jsonBytes } from "../json-bytes.js";
import { create, toJson } from "@bufbuild/protobuf";
import { DurationSchema } from "@bufbuild/protobuf/wkt";
import {
  Code,
  ConnectError,
  createClient,
  createContextKey,
  createContextValues,
  createRouterTransport,
  type ConnectRouter,
  type HandlerContext,
  type Interceptor,
  type Transport,
} from "@connectrpc/connect";
import { Health } from "@pies/proto/health";
import { GetRunResponseSchema, RunSchema, RunsService, RunStatus } from "@pies/proto/runs";
import { describe, expect, it, vi } from "vitest";
import type { Logger } from "../logger.js";
import { retryableError, retryAfterSeconds } from "../retry-after.js";
import { DatabaseFaults } from "../unavailable.js";
import { directTransport } from "./direct.js";
import { errorInterceptor } from "./server.js";

/** A logger that keeps what it is given (errorInterceptor logs at warn and error). */
function recordingLogger() {
  const lines: { level: string; obj: Record<string, unknown>; msg: string }[] = [];
  const at = (level: string) => (obj: Record<string, unknown>, msg: string) =>
    void lines.push({ level, obj, msg });
  const logger = { warn: at("warn"), error: at("error") } as unknown as Logger;
  return { logger, lines };
}

const principal = createContextKey<string>("nobody", { description: "principal" });

/** Settles when the handler of the slow method has been entered, with its context. */
let entered: (ctx: HandlerContext) => void = () => {};

/** RunsService handlers that show what a call gives them. */
const routes = (router: ConnectRouter) =>
  router.service(RunsService, {
    // Echoes what it was given: the request, a header, a context value, its deadline.
    getRun(req, ctx) {
      ctx.responseHeader.set("x-answered-by", "runs");
      ctx.responseTrailer.set("x-trailer", "end");
      return {
        run: {
          id: req.id,
          projectId: req.projectId,
          interactionName: `${ctx.requestHeader.get("x-principal") ?? ""}|${ctx.values.get(principal)}`,
          ttl: ctx.timeoutMs() === undefined ? -1 : 1,
          parameters: { nested: { n: 1 } },
        },
      };
    },
    // Fails as asked.
    updateRun(req, ctx) {
      switch (req.id) {
        case "busy":
          ctx.responseHeader.set("x-seen", "yes");
          throw retryableError("busy", Code.ResourceExhausted, 2);
        case "details": {
          const err = new ConnectError("with details", Code.FailedPrecondition);
          err.details.push({ desc: DurationSchema, value: { seconds: 3n } });
          throw err;
        }
        case "cause": {
          const lost = Object.assign(new Error("connect ECONNREFUSED 10.0.0.1:5432"), {
            code: "ECONNREFUSED",
          });
          throw new ConnectError("the provider failed", Code.Internal, undefined, undefined, lost);
        }
        case "bug":
          throw new TypeError("cannot read properties of undefined (reading 'x')");
        case "database":
          throw Object.assign(new Error("terminating connection due to administrator command"), {
            code: "57P01",
          });
        case "mutate":
          (req as { id: string }).id = "changed";
          return {};
        default:
          return {};
      }
    },
    // Waits for its signal, and ends with what it says.
    async listRuns(_req, ctx) {
      entered(ctx);
      await new Promise((resolve) => ctx.signal.addEventListener("abort", resolve));
      throw new ConnectError("ended by its signal", Code.Aborted);
    },
  });

const client = (transport: Transport) => createClient(RunsService, transport);

async function failure(call: Promise<unknown>): Promise<ConnectError> {
  const err = await call.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ConnectError);
  return err as ConnectError;
}

describe("directTransport", () => {
  it("answers as the in-memory Connect transport does: full messages, headers, trailers", async () => {
    const answers = [];
    for (const [transport, values] of [
      // The caller's context values reach the handler in process; behind a transport (which can
      // carry none) the handler gets its own.
      [directTransport(routes), "bob"],
      [createRouterTransport(routes), "nobody"],
    ] as const) {
      let header: Headers | undefined;
      let trailer: Headers | undefined;
      const res = await client(transport).getRun(
        { projectId: "p", id: "r1" },
        {
          headers: { "x-principal": "alice" },
          contextValues: createContextValues().set(principal, "bob"),
          onHeader: (h) => (header = h),
          onTrailer: (t) => (trailer = t),
        },
      );
      expect(res.$typeName).toBe(GetRunResponseSchema.typeName);
      expect(res.run?.$typeName).toBe(RunSchema.typeName);
      // Fields the handler did not set are there, with their defaults.
      expect(res.run?.status).toBe(RunStatus.UNSPECIFIED);
      expect(res.run?.interactionName).toBe(`alice|${values}`);
      expect(res.run?.ttl).toBe(-1);
      expect(header?.get("x-answered-by")).toBe("runs");
      expect(trailer?.get("x-trailer")).toBe("end");
      // The rest is the same either way.
      answers.push(
        toJson(GetRunResponseSchema, { ...res, run: { ...res.run!, interactionName: "" } }),
      );
    }
    expect(answers[0]).toEqual(answers[1]);
  });

  it("gives the handler the caller's deadline, else the default one, else none", async () => {
    const ttl = async (transport: Transport, timeoutMs?: number) =>
      (await client(transport).getRun({ id: "r" }, { timeoutMs })).run?.ttl;
    expect(await ttl(directTransport(routes), 5000)).toBe(1);
    expect(await ttl(directTransport(routes))).toBe(-1);
    expect(await ttl(directTransport(routes, { defaultTimeoutMs: 5000 }))).toBe(1);
    expect(await ttl(directTransport(routes, { defaultTimeoutMs: 5000 }), 0)).toBe(-1);
  });

  it("answers a handler's error with its code, message, metadata and details, as the wire does", async () => {
    for (const transport of [directTransport(routes), createRouterTransport(routes)]) {
      const busy = await failure(client(transport).updateRun({ id: "busy" }));
      expect(busy.code).toBe(Code.ResourceExhausted);
      expect(busy.rawMessage).toBe("busy");
      expect(retryAfterSeconds(busy)).toBe(2);
      // The response headers the handler set before it failed are in the metadata too.
      expect(busy.metadata.get("x-seen")).toBe("yes");

      const detailed = await failure(client(transport).updateRun({ id: "details" }));
      expect(detailed.code).toBe(Code.FailedPrecondition);
      expect(detailed.rawMessage).toBe("with details");
      // Encoded as the wire carries them: a type name and bytes, which findDetails decodes.
      expect(detailed.details).toEqual([
        expect.objectContaining({
          type: "google.protobuf.Duration",
          value: expect.any(Uint8Array),
        }),
      ]);
      expect(detailed.findDetails(DurationSchema)).toEqual([
        create(DurationSchema, { seconds: 3n }),
      ]);
    }
  });

  it("keeps a handler error's cause out of what the caller gets", async () => {
    const err = await failure(client(directTransport(routes)).updateRun({ id: "cause" }));
    expect(err.code).toBe(Code.Internal);
    expect(err.rawMessage).toBe("the provider failed");
    // The gateway would read ECONNREFUSED in the cause chain as its own peer lost (503).
    expect(err.cause).toBeUndefined();
  });

  it("applies errorInterceptor: unexpected errors logged with their cause and answered INTERNAL; database faults UNAVAILABLE", async () => {
    const { logger, lines } = recordingLogger();
    const faults = new DatabaseFaults();
    const runs = client(
      directTransport(routes, { interceptors: [errorInterceptor(logger, faults)] }),
    );
    const bug = await failure(runs.updateRun({ id: "bug" }));
    expect(bug.code).toBe(Code.Internal);
    expect(bug.rawMessage).toBe("internal error");
    expect(bug.cause).toBeUndefined();
    expect(lines).toEqual([
      expect.objectContaining({
        level: "error",
        msg: "unhandled error",
        obj: expect.objectContaining({
          err: expect.any(TypeError),
          procedure: expect.stringContaining("pies.runs.v1.RunsService/UpdateRun"),
        }),
      }),
    ]);

    expect(faults.lastAt).toBe(0);
    const down = await failure(runs.updateRun({ id: "database" }));
    expect(down.code).toBe(Code.Unavailable);
    expect(down.rawMessage).toBe("the database is unavailable");
    expect(faults.lastAt).toBeGreaterThan(0);
    expect(lines[1]).toMatchObject({ level: "warn", msg: "database unavailable" });

    // A handler's own ConnectError passes as it is, unlogged.
    const busy = await failure(runs.updateRun({ id: "busy" }));
    expect(busy.code).toBe(Code.ResourceExhausted);
    expect(lines).toHaveLength(2);
  });

  it("answers anything but a ConnectError as INTERNAL without an interceptor, as a handler factory does", async () => {
    const err = await failure(client(directTransport(routes)).updateRun({ id: "bug" }));
    expect(err.code).toBe(Code.Internal);
    expect(err.rawMessage).toBe("internal error");
  });

  it("runs the interceptors outermost first, and the handler sees the request they pass on", async () => {
    const order: string[] = [];
    const tagging =
      (name: string): Interceptor =>
      (next) =>
      async (req) => {
        order.push(`${name} in`);
        req.header.set("x-principal", `${req.header.get("x-principal") ?? ""}${name}`);
        const res = await next(req);
        order.push(`${name} out`);
        return res;
      };
    const res = await client(
      directTransport(routes, { interceptors: [tagging("a"), tagging("b")] }),
    ).getRun({ id: "r" });
    expect(order).toEqual(["a in", "b in", "b out", "a out"]);
    expect(res.run?.interactionName).toBe("ab|nobody");
  });

  it("answers a caller that aborts at once with CANCELED, and aborts the handler's signal", async () => {
    const handlerCtx = new Promise<HandlerContext>((resolve) => (entered = resolve));
    const controller = new AbortController();
    const call = client(directTransport(routes)).listRuns({}, { signal: controller.signal });
    const ctx = await handlerCtx;
    expect(ctx.signal.aborted).toBe(false);
    controller.abort();
    const err = await failure(call);
    expect(err.code).toBe(Code.Canceled);
    expect(ctx.signal.aborted).toBe(true);
  });

  it("does not call the handler for a caller that has already gone away", async () => {
    const handler = vi.fn();
    entered = handler;
    const err = await failure(
      client(directTransport(routes)).listRuns({}, { signal: AbortSignal.abort() }),
    );
    expect(err.code).toBe(Code.Canceled);
    expect(handler).not.toHaveBeenCalled();
  });

  it("answers DEADLINE_EXCEEDED when the deadline passes, the caller's or the default one", async () => {
    for (const [transport, timeoutMs] of [
      [directTransport(routes), 50],
      [directTransport(routes, { defaultTimeoutMs: 50 }), undefined],
    ] as const) {
      const handlerCtx = new Promise<HandlerContext>((resolve) => (entered = resolve));
      const started = Date.now();
      const err = await failure(client(transport).listRuns({}, { timeoutMs }));
      expect(err.code).toBe(Code.DeadlineExceeded);
      expect(Date.now() - started).toBeLessThan(2000);
      const ctx = await handlerCtx;
      expect(ctx.signal.aborted).toBe(true);
      expect(ConnectError.from(ctx.signal.reason).code).toBe(Code.DeadlineExceeded);
    }
  });

  it("ends the handler's signal with its call, as behind a transport", async () => {
    let seen: AbortSignal | undefined;
    const transport = directTransport((router) =>
      router.service(RunsService, {
        getRun(_req, ctx) {
          seen = ctx.signal;
          return {};
        },
      }),
    );
    await client(transport).getRun({ id: "r" });
    expect(seen?.aborted).toBe(true);
  });

  it("shares messages rather than copying them (no serialization), and freezes them when asked", async () => {
    const parametersJson = jsonBytes({ nested: { n: 1 } });
    const shared = directTransport((router) =>
      router.service(RunsService, {
        getRun: () => ({ run: { id: "r", parametersJson, source: { label: "l" } } }),
      }),
    );
    const { run } = await client(shared).getRun({ id: "r" });
    expect(run!.parametersJson).toBe(parametersJson);

    // With freezeMessages, a handler that changes its request fails there (INTERNAL), and a
    // caller that changes its answer throws.
    const frozen = client(directTransport(routes, { freezeMessages: true }));
    const err = await failure(frozen.updateRun({ id: "mutate" }));
    expect(err.code).toBe(Code.Internal);
    const answer = await frozen.getRun({ id: "r" });
    expect(() => {
      answer.run!.source!.label = "changed";
    }).toThrow(TypeError);
    expect(() => {
      answer.run!.id = "other";
    }).toThrow(TypeError);
  });

  it("refuses streaming methods, methods not served here and methods not implemented, UNIMPLEMENTED", async () => {
    const transport = directTransport((router) => {
      routes(router);
      router.service(Health, { check: () => ({}) });
    });
    const watch = createClient(Health, transport).watch({ service: "" });
    const streamed = await failure(
      (async () => {
        for await (const _ of watch) return;
      })(),
    );
    expect(streamed.code).toBe(Code.Unimplemented);
    expect(streamed.rawMessage).toContain("streaming");

    const elsewhere = await failure(
      createClient(Health, directTransport(routes)).check({ service: "" }),
    );
    expect(elsewhere.code).toBe(Code.Unimplemented);
    expect(elsewhere.rawMessage).toContain("grpc.health.v1.Health.Check is not served");

    const missing = await failure(client(transport).heartbeatRuns({ runIds: [] }));
    expect(missing.code).toBe(Code.Unimplemented);
    expect(missing.rawMessage).toBe("pies.runs.v1.RunsService.HeartbeatRuns is not implemented");
  });
});
