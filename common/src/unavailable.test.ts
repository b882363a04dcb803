import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { createLogger } from "./logger.js";
import { errorInterceptor } from "./server/server.js";
import { RecordTooLarge } from "./bus/run-records.js";
import { isTooLarge } from "./retry-after.js";
import { DatabaseFaults, isConnectionError, isDatabaseUnavailable } from "./unavailable.js";

const systemError = (code: string, message = code) => Object.assign(new Error(message), { code });
const pgError = (code: string, message: string) => Object.assign(new Error(message), { code });

describe("isDatabaseUnavailable", () => {
  it("recognises a PostgreSQL that is down, restarting or shutting down", () => {
    for (const err of [
      systemError("ECONNREFUSED", "connect ECONNREFUSED 127.0.0.1:5432"),
      systemError("ECONNRESET", "read ECONNRESET"),
      new Error("Connection terminated unexpectedly"),
      new Error("Connection terminated due to connection timeout"),
      new Error("Client has encountered a connection error and is not queryable"),
      pgError("57P01", "terminating connection due to administrator command"),
      pgError("57P02", "terminating connection because of crash of another server process"),
      pgError("57P03", "the database system is starting up"),
      pgError("08006", "connection failure"),
      pgError("53300", "sorry, too many clients already"),
      new Error("query failed", { cause: systemError("EPIPE") }),
    ]) {
      expect(isDatabaseUnavailable(err), err.message).toBe(true);
    }
  });

  it("does not take a bad query or a bug for an outage", () => {
    for (const err of [
      pgError("23505", "duplicate key value violates unique constraint"),
      pgError("22P02", "invalid input syntax for type uuid"),
      pgError("42P01", 'relation "runs.runs" does not exist'),
      new TypeError("Cannot read properties of undefined"),
      "a string",
      undefined,
    ]) {
      expect(isDatabaseUnavailable(err)).toBe(false);
    }
  });
});

describe("isConnectionError", () => {
  it("finds a lost connection anywhere in the cause chain", () => {
    const reset = new ConnectError("read ECONNRESET", Code.Aborted);
    reset.cause = systemError("ECONNRESET");
    expect(isConnectionError(reset)).toBe(true);
    expect(isConnectionError(new Error("outer", { cause: systemError("ECONNREFUSED") }))).toBe(
      true,
    );
    expect(isConnectionError(new ConnectError("run r not found", Code.NotFound))).toBe(false);
  });

  it("survives a cause cycle", () => {
    const a = new Error("a") as Error & { cause?: unknown };
    const b = new Error("b", { cause: a });
    a.cause = b;
    expect(isConnectionError(a)).toBe(false);
  });
});

describe("errorInterceptor", () => {
  const logger = createLogger("interceptor-test", "silent");
  const call = (faults: DatabaseFaults, thrown: unknown) =>
    errorInterceptor(
      logger,
      faults,
    )(async () => {
      throw thrown;
    })({ url: "/pies.runs.v1.RunsService/GetRun" } as never);

  it("answers UNAVAILABLE, with no detail, while the database is down, and notes the fault", async () => {
    const faults = new DatabaseFaults();
    const err = await call(faults, new Error("Connection terminated unexpectedly")).catch(
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.Unavailable);
    expect((err as ConnectError).rawMessage).toBe("the database is unavailable");
    expect(faults.lastAt).toBeGreaterThan(Date.now() - 1000);
  });

  it("answers INTERNAL with no detail for anything else, and passes ConnectErrors through", async () => {
    const faults = new DatabaseFaults();
    const internal = await call(faults, new TypeError("x is undefined")).catch((e: unknown) => e);
    expect(internal).toMatchObject({ code: Code.Internal, rawMessage: "internal error" });
    const notFound = new ConnectError("run r not found", Code.NotFound);
    expect(await call(faults, notFound).catch((e: unknown) => e)).toBe(notFound);
    expect(faults.lastAt).toBe(0);
  });
  it("answers a run record too large for the log as a request too large (413), naming the sizes", async () => {
    const faults = new DatabaseFaults();
    const err = await call(faults, new RecordTooLarge("run_1", 2_000_000, 1_047_552)).catch(
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(ConnectError);
    expect(isTooLarge(err as ConnectError)).toBe(true);
    expect((err as ConnectError).rawMessage).toContain("2000000 bytes");
    expect((err as ConnectError).rawMessage).toContain("1047552 bytes");
    expect(faults.lastAt).toBe(0);
  });
});
