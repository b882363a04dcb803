import { Code, ConnectError } from "@connectrpc/connect";

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
 * never a 403 that confirms a resource exists; anything else is 500 `internal`. The gateway answers
 * a service's error with it, and an experiment's failed pair names its error with the same code.
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

/** A Connect code's REST status and error code: `[400, "invalid_request"]`. */
export function restError(code: Code): readonly [status: number, code: string] {
  return REST_ERRORS[code] ?? [500, "internal"];
}
