import { Code, ConnectError } from "@connectrpc/connect";
import { isTooLarge, retryAfterSeconds } from "./retry-after.js";
import { isConnectionError } from "./unavailable.js";

/** INVALID_ARGUMENT with a message for the caller (the gateway answers 400). */
export const invalid = (message: string) => new ConnectError(message, Code.InvalidArgument);

/** NOT_FOUND naming what was looked for: `run r_1 not found`. */
export const notFound = (kind: string, id: string) =>
  new ConnectError(`${kind} ${id} not found`, Code.NotFound);

/** The request's project id; INVALID_ARGUMENT when it is empty, as every record belongs to one. */
export function requireProject(projectId: string): string {
  if (!projectId) throw invalid("project_id is required");
  return projectId;
}

/** Default and largest page of a list call. */
export const PAGE_SIZE = { default: 100, max: 1000 } as const;

/** Clamps a requested page size: the default for 0 (unset) or less, at most the largest. */
export function pageSize(limit: number): number {
  return limit <= 0 ? PAGE_SIZE.default : Math.min(limit, PAGE_SIZE.max);
}

/**
 * A message field that a peer always sets in its answer (proto3 leaves every message field
 * optional in the types): INTERNAL naming it when it is absent, rather than a TypeError later.
 */
export function answered<T>(value: T | undefined, what: string): T {
  if (value === undefined) throw new ConnectError(`the answer has no ${what}`, Code.Internal);
  return value;
}

/**
 * Connect codes as the REST API answers them (DESIGN.md §10): a precise status and code for each,
 * never a 403 that confirms a resource exists; anything else is 500 `internal`.
 */
const REST_ERRORS: Partial<Record<Code, readonly [status: number, code: string]>> = {
  [Code.InvalidArgument]: [400, "invalid_request"],
  [Code.OutOfRange]: [400, "invalid_request"],
  [Code.Unauthenticated]: [401, "unauthorized"],
  [Code.PermissionDenied]: [404, "not_found"],
  [Code.NotFound]: [404, "not_found"],
  [Code.AlreadyExists]: [409, "conflict"],
  [Code.FailedPrecondition]: [409, "conflict"],
  [Code.Aborted]: [409, "conflict"],
  [Code.ResourceExhausted]: [429, "rate_limited"],
  [Code.Unimplemented]: [501, "not_implemented"],
  [Code.Unavailable]: [503, "unavailable"],
  [Code.DeadlineExceeded]: [504, "timeout"],
};

/** A service's error as the REST API answers it. */
export interface RestError {
  status: number;
  /** `invalid_request`, `not_found`, … */
  code: string;
  /** For the caller: a 500's is "internal error", a 503's names no address. */
  message: string;
  /** When the caller may try again (`Retry-After`), where the service said. */
  retryAfterSeconds?: number;
}

/** connect-node's message for a request message over a server's readMaxBytes. */
const overReadMax = /^message size (\d+ )?is larger than configured readMaxBytes \d+$/;
/** An address or a system error code in a message: for the logs, not for callers. */
const leaksAddress = /\d{1,3}(\.\d{1,3}){3}|\[[0-9a-fA-F:]+\]|:\d{2,5}\b|\bE[A-Z]{4,}\b/;
const UNAVAILABLE = "a pies service is unavailable";

/**
 * A service's error as the REST API answers it: the gateway answers with it, and an experiment's
 * pair whose replay could not start keeps it as its error, so both say the same.
 */
export function restErrorOf(err: ConnectError): RestError {
  // A connection to a service lost or refused is 503 whatever code connect-node chose (a reset
  // is ABORTED); the peer transports already say which service, this keeps addresses out if
  // one did not.
  if (err.code !== Code.Unavailable && isConnectionError(err)) {
    return { status: 503, code: "unavailable", message: UNAVAILABLE };
  }
  // A request that a service cannot take whole (a run too large to record): 413, not 429; also
  // when connect-node's own path of a service refuses it (its readMaxBytes), unmarked.
  if (
    isTooLarge(err) ||
    (err.code === Code.ResourceExhausted && overReadMax.test(err.rawMessage))
  ) {
    return { status: 413, code: "payload_too_large", message: err.rawMessage };
  }
  const [status, code] = REST_ERRORS[err.code] ?? [500, "internal"];
  // A service that says when to try again (retryableError) is passed on.
  const retryAfter = retryAfterSeconds(err);
  const message =
    status === 500
      ? "internal error"
      : status === 503 && leaksAddress.test(err.rawMessage)
        ? UNAVAILABLE
        : err.rawMessage;
  return retryAfter === undefined
    ? { status, code, message }
    : { status, code, message, retryAfterSeconds: retryAfter };
}
