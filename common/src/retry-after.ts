import { Code, ConnectError } from "@connectrpc/connect";

/** The error metadata key that tells a caller when to try again, in seconds (HTTP's Retry-After). */
const RETRY_AFTER = "retry-after";

/**
 * A ConnectError that asks its caller to try again after `seconds`: the gateway answers it with a
 * `Retry-After` header (any code; `RESOURCE_EXHAUSTED` is a 429, `UNAVAILABLE` a 503).
 */
export function retryableError(message: string, code: ConnectError["code"], seconds: number) {
  return new ConnectError(
    message,
    code,
    new Headers({ [RETRY_AFTER]: String(Math.max(1, Math.ceil(seconds))) }),
  );
}

/** The seconds an error asks its caller to wait before trying again, if it says. */
export function retryAfterSeconds(err: ConnectError): number | undefined {
  const value = err.metadata.get(RETRY_AFTER);
  if (value === null || !/^\d{1,9}$/.test(value.trim())) return undefined;
  return Number(value.trim());
}

/** The error metadata key that marks a RESOURCE_EXHAUSTED error as a request too large. */
const TOO_LARGE = "pies-too-large";

/**
 * A ConnectError for a request larger than a service can take (RESOURCE_EXHAUSTED, as gRPC's own
 * message size limit): the gateway answers it 413 `payload_too_large`, not 429, and a retry of the
 * same request cannot succeed.
 */
export function tooLargeError(message: string) {
  return new ConnectError(message, Code.ResourceExhausted, new Headers({ [TOO_LARGE]: "1" }));
}

/** Whether an error is one of tooLargeError's. */
export const isTooLarge = (err: ConnectError) =>
  err.code === Code.ResourceExhausted && err.metadata.get(TOO_LARGE) === "1";
