import { AssertionError } from "node:assert";
import { Code, ConnectError } from "@connectrpc/connect";

/** JSON of a value that may hold bigints (protobuf timestamps), for failure messages. */
const describe = (value: unknown) =>
  JSON.stringify(value, (_k, v: unknown) => (typeof v === "bigint" ? String(v) : v));

/**
 * Awaits a Connect call (or runs a function) that must fail with `code`, and with a raw message
 * matching `message` when given; returns the error for further checks. It throws an assertion
 * error (which any test runner reports) when the call succeeds, throws something other than a
 * ConnectError, or fails with another code or message. Written without a test runner's `expect`
 * so that the test kit does not depend on one.
 */
export async function expectCode(
  call: Promise<unknown> | (() => unknown),
  code: Code,
  message?: RegExp,
): Promise<ConnectError> {
  let outcome: { ok: true; value: unknown } | { ok: false; error: unknown };
  try {
    outcome = { ok: true, value: await (typeof call === "function" ? call() : call) };
  } catch (error) {
    outcome = { ok: false, error };
  }
  if (outcome.ok) {
    throw new AssertionError({
      message: `expected ${Code[code]}, the call succeeded with ${describe(outcome.value)}`,
    });
  }
  const error = outcome.error;
  if (!(error instanceof ConnectError)) {
    throw new AssertionError({
      message: `expected a ConnectError ${Code[code]}, got ${String(error)}`,
      actual: error,
    });
  }
  if (error.code !== code) {
    throw new AssertionError({
      message: `expected ${Code[code]}, got ${Code[error.code]}: ${error.message}`,
      actual: Code[error.code],
      expected: Code[code],
      operator: "strictEqual",
    });
  }
  if (message && !message.test(error.rawMessage)) {
    throw new AssertionError({
      message: `expected a message matching ${String(message)}, got ${JSON.stringify(error.rawMessage)}`,
      actual: error.rawMessage,
      expected: message,
      operator: "match",
    });
  }
  return error;
}
