import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { toHttpError } from "./errors.js";

const withCause = (err: ConnectError, code: string) => {
  err.cause = Object.assign(new Error(err.rawMessage), { code });
  return err;
};

describe("toHttpError for a service that is unavailable", () => {
  it("answers 503 naming the service", () => {
    const error = toHttpError(
      new ConnectError("the runs service is unavailable", Code.Unavailable),
    );
    expect(error).toMatchObject({
      status: 503,
      code: "unavailable",
      message: "the runs service is unavailable",
    });
  });

  it("answers a reset connection as 503, not 409", () => {
    const reset = withCause(new ConnectError("read ECONNRESET", Code.Aborted), "ECONNRESET");
    expect(toHttpError(reset)).toMatchObject({
      status: 503,
      code: "unavailable",
      message: "a pies service is unavailable",
    });
  });

  it("never shows an internal address", () => {
    const refused = withCause(
      new ConnectError("connect ECONNREFUSED 127.0.0.1:51053", Code.Unavailable),
      "ECONNREFUSED",
    );
    const error = toHttpError(refused);
    expect(error.status).toBe(503);
    expect(error.message).toBe("a pies service is unavailable");
  });

  it("keeps a real conflict a 409", () => {
    expect(
      toHttpError(new ConnectError("run r is completed", Code.FailedPrecondition)),
    ).toMatchObject({ status: 409, code: "conflict" });
  });
});
