import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { peerUnavailableInterceptor } from "./client.js";

const systemError = (code: string, message: string) => Object.assign(new Error(message), { code });

/** What a call through the interceptor throws when the transport threw `thrown`. */
async function through(thrown: unknown, signal = new AbortController().signal) {
  const call = peerUnavailableInterceptor("runs")(async () => {
    throw thrown;
  });
  return call({ signal } as never).then(
    () => new ConnectError("resolved", Code.Unknown),
    (err: unknown) => err as ConnectError,
  );
}

describe("peerUnavailableInterceptor", () => {
  it("answers a refused, reset or cancelled peer connection as UNAVAILABLE naming the peer", async () => {
    const refused = new ConnectError("connect ECONNREFUSED 127.0.0.1:51053", Code.Unavailable);
    refused.cause = systemError("ECONNREFUSED", "connect ECONNREFUSED 127.0.0.1:51053");
    const reset = new ConnectError("read ECONNRESET", Code.Aborted);
    reset.cause = systemError("ECONNRESET", "read ECONNRESET");
    const cancelled = new ConnectError(
      "http/2 stream closed with error code CANCEL",
      Code.Canceled,
    );
    for (const err of [refused, reset, cancelled]) {
      const answered = await through(err);
      expect(answered).toMatchObject({
        code: Code.Unavailable,
        rawMessage: "the runs service is unavailable",
      });
      expect(answered.cause).toBe(err);
    }
  });

  it("passes the peer's own answers through, and a call the caller cancelled", async () => {
    const notFound = new ConnectError("run r not found", Code.NotFound);
    expect(await through(notFound)).toBe(notFound);
    const down = new ConnectError("the database is unavailable", Code.Unavailable);
    expect(await through(down)).toBe(down);
    const aborted = new AbortController();
    aborted.abort();
    const cancelled = new ConnectError("the operation was aborted", Code.Canceled);
    expect(await through(cancelled, aborted.signal)).toBe(cancelled);
  });
});
