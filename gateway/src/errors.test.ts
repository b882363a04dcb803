import { Code, ConnectError } from "@connectrpc/connect";
import { retryableError, tooLargeError } from "@pies/common";
import Fastify from "fastify";
import { describe, expect, it } from "vitest";
import { HttpError, sendError, toHttpError, tooManyRequests } from "./errors.js";

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

/** What a client gets for `error`, through Fastify. */
async function answer(error: HttpError) {
  const app = Fastify();
  app.get("/", (_request, reply) => sendError(reply, error));
  const response = await app.inject({ method: "GET", url: "/" });
  await app.close();
  return { status: response.statusCode, headers: response.headers, json: response.json() };
}

describe("Retry-After", () => {
  it("is sent for an HttpError that says when to try again, with the pies error body", async () => {
    const r = await answer(tooManyRequests("too many streams", 5));
    expect(r.status).toBe(429);
    expect(r.headers["retry-after"]).toBe("5");
    expect(r.json).toEqual({
      error: "Too Many Requests",
      status: 429,
      code: "rate_limited",
      message: "too many streams",
    });
  });

  it("passes on a service's retry-after, whatever the code", async () => {
    const limited = toHttpError(retryableError("over its share", Code.ResourceExhausted, 1));
    expect([limited.status, limited.code, limited.retryAfterSeconds]).toEqual([
      429,
      "rate_limited",
      1,
    ]);
    const unavailable = await answer(toHttpError(retryableError("down", Code.Unavailable, 10)));
    expect(unavailable.status).toBe(503);
    expect(unavailable.headers["retry-after"]).toBe("10");
  });

  it("answers a request too large for a service 413, not 429", async () => {
    const r = await answer(toHttpError(tooLargeError("the run is too large to record")));
    expect(r.status).toBe(413);
    expect(r.headers["retry-after"]).toBeUndefined();
    expect(r.json).toEqual({
      error: "Payload Too Large",
      status: 413,
      code: "payload_too_large",
      message: "the run is too large to record",
    });
  });

  it("answers a service's refusal of a request over its readMaxBytes 413, marked or not", async () => {
    const message = "message size 40000000 is larger than configured readMaxBytes 33554432";
    for (const err of [
      tooLargeError(message),
      // connect-node's own path answers it unmarked.
      new ConnectError(message, Code.ResourceExhausted),
    ]) {
      const r = toHttpError(err);
      expect([r.status, r.code, r.message]).toEqual([413, "payload_too_large", message]);
    }
    // Any other RESOURCE_EXHAUSTED is still a limit to wait for.
    expect(toHttpError(new ConnectError("over the limit", Code.ResourceExhausted)).status).toBe(
      429,
    );
  });

  it("is absent when nobody said when to try again", async () => {
    const r = await answer(toHttpError(new ConnectError("busy", Code.ResourceExhausted)));
    expect(r.status).toBe(429);
    expect(r.headers["retry-after"]).toBeUndefined();
    expect((await answer(new HttpError(400, "invalid_request", "x"))).headers).not.toHaveProperty(
      "retry-after",
    );
  });
});
