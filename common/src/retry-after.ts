import { ConnectError } from "@connectrpc/connect";

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
