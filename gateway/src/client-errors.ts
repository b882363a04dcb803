import { STATUS_CODES } from "node:http";
import type { Socket } from "node:net";
import type { Logger } from "@pies/common";
import {
  badRequest,
  errorBody,
  headersTooLarge,
  payloadTooLarge,
  requestTimeout,
  type HttpError,
} from "./errors.js";

/** What Node's HTTP parser and timers report before a request reaches Fastify, as a pies error. */
function toClientError(err: NodeJS.ErrnoException): HttpError {
  if (err.code === "ERR_HTTP_REQUEST_TIMEOUT" || err.code === "ERR_HTTP_HEADERS_TIMEOUT") {
    return requestTimeout();
  }
  if (err.code === "HPE_HEADER_OVERFLOW") return headersTooLarge();
  if (err.code === "HPE_CHUNK_EXTENSIONS_OVERFLOW") {
    return payloadTooLarge("the request's chunk extensions are too large");
  }
  return badRequest("the request is not valid HTTP/1.1");
}

/**
 * Fastify's `clientErrorHandler`: Node's own handler answers these with a bare status line and
 * Fastify's with its own JSON, so pies writes its error shape itself, then closes the connection
 * (after a framing error or a timeout the rest of the bytes on it cannot be trusted). Nothing is
 * written when part of a response already went out on the socket.
 */
export function createClientErrorHandler(logger: Logger) {
  return (err: NodeJS.ErrnoException, socket: Socket) => {
    if (err.code === "ECONNRESET" || socket.destroyed) return;
    const error = toClientError(err);
    logger.debug({ err: { code: err.code, message: err.message } }, "client error");
    const response = (socket as Socket & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
    if (socket.writable && !response?.headersSent) {
      const body = JSON.stringify(errorBody(error));
      socket.write(
        `HTTP/1.1 ${error.status} ${STATUS_CODES[error.status]}\r\n` +
          "content-type: application/json; charset=utf-8\r\n" +
          `content-length: ${Buffer.byteLength(body)}\r\n` +
          "connection: close\r\n\r\n" +
          body,
      );
    }
    socket.destroy();
  };
}
