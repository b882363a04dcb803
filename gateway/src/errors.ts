import { STATUS_CODES } from "node:http";
import { ConnectError } from "@connectrpc/connect";
import { restErrorOf } from "@pies/common";
import type { FastifyError, FastifyReply } from "fastify";
import { ZodError, type ZodIssue } from "zod";

/** What an HttpError tells beyond its body. */
export interface HttpErrorOptions {
  /** Sent as `Retry-After` (whole seconds): when the client may try again (429, 503). */
  retryAfterSeconds?: number;
}

/** An error answered as JSON `{error, status, code, message, details}` (DESIGN.md §10). */
export class HttpError extends Error {
  readonly retryAfterSeconds?: number;

  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly details?: unknown,
    options: HttpErrorOptions = {},
  ) {
    super(message);
    this.retryAfterSeconds = options.retryAfterSeconds;
  }
}

export const badRequest = (message: string, details?: unknown) =>
  new HttpError(400, "invalid_request", message, details);
export const notFound = (message: string) => new HttpError(404, "not_found", message);
export const unauthorized = (message = "a valid API key is required") =>
  new HttpError(401, "unauthorized", message);
/** A key whose role may not do this (a role check reveals no resource, so 403 is right here). */
export const forbidden = (message: string) => new HttpError(403, "forbidden", message);
/** 429 `rate_limited`, with `Retry-After: retryAfterSeconds`. */
export const tooManyRequests = (message: string, retryAfterSeconds: number) =>
  new HttpError(429, "rate_limited", message, undefined, { retryAfterSeconds });

/**
 * A union's failure as the issues of the branch whose type the value has (a facets map, not the
 * list; a query string, not the object): zod's own "Invalid input" says nothing of what is wrong.
 * When no branch or several fit, the union's issue stays.
 */
function unionIssues(issue: ZodIssue): ZodIssue[] {
  if (issue.code !== "invalid_union") return [issue];
  const fitting = issue.unionErrors.filter(
    (e) => !e.issues.some((i) => i.code === "invalid_type" && i.path.length === issue.path.length),
  );
  const [only] = fitting;
  return only && fitting.length === 1 ? only.issues.flatMap(unionIssues) : [issue];
}

/** Translates whatever a handler threw into an HttpError; unknown errors become a bare 500. */
export function toHttpError(err: unknown): HttpError {
  if (err instanceof HttpError) return err;
  if (err instanceof ZodError) {
    const issues = err.issues
      .flatMap(unionIssues)
      .map((i) => ({ path: i.path.join("."), message: i.message }));
    const first = issues[0];
    return badRequest(
      first ? `${first.path || "body"}: ${first.message}` : "invalid request body",
      { issues },
    );
  }
  if (err instanceof ConnectError) {
    const { status, code, message, retryAfterSeconds } = restErrorOf(err);
    return new HttpError(status, code, message, undefined, { retryAfterSeconds });
  }
  const fastifyError = err as FastifyError;
  if (fastifyError?.code === "FST_ERR_CTP_BODY_TOO_LARGE") {
    return payloadTooLarge("the request body is too large");
  }
  if (typeof fastifyError?.statusCode === "number" && fastifyError.statusCode < 500) {
    const status = fastifyError.statusCode;
    const message =
      fastifyError.code === "FST_ERR_CTP_INVALID_JSON_BODY" || err instanceof SyntaxError
        ? "the request body is not valid JSON"
        : fastifyError.message;
    if (status === 415) {
      return new HttpError(
        415,
        "unsupported_media_type",
        "the request body must be application/json",
      );
    }
    if (status === 414) return new HttpError(414, "uri_too_long", "the request path is too long");
    if (status === 408) return requestTimeout();
    if (status === 431) return headersTooLarge();
    return new HttpError(status, "invalid_request", message);
  }
  return new HttpError(500, "internal", "internal error");
}

/** 413: the request carries more than the server takes. */
export const payloadTooLarge = (message: string) =>
  new HttpError(413, "payload_too_large", message);
/** 408: the request (headers or body) did not arrive in time. */
export const requestTimeout = () =>
  new HttpError(408, "request_timeout", "the request was not received in time");
/** 431: the request line and headers exceed the server's limit. */
export const headersTooLarge = () =>
  new HttpError(431, "headers_too_large", "the request headers are too large");

/** The JSON body of an error (DESIGN.md §10). */
export function errorBody(error: HttpError) {
  return {
    error: STATUS_CODES[error.status] ?? "Error",
    status: error.status,
    code: error.code,
    message: error.message,
    ...(error.details !== undefined ? { details: error.details } : {}),
  };
}

export function sendError(reply: FastifyReply, error: HttpError) {
  if (error.retryAfterSeconds !== undefined) {
    reply.header("retry-after", String(Math.max(0, Math.ceil(error.retryAfterSeconds))));
  }
  return reply.status(error.status).send(errorBody(error));
}
