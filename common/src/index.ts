// The light entry: configuration, logging, ids, JSON and Connect error helpers. It loads nothing
// heavy — no pg (whose global type parser this would set), no NATS, no HTTP/2 server — so that the
// gateway can read its config without them. Those live in @pies/common/db, /bus and /server.
import "./text-encoding.js";
export * from "./config.js";
export * from "./logger.js";
export * from "./ids.js";
export * from "./json.js";
export * from "./json-check.js";
export * from "./run-json.js";
export * from "./json-bytes.js";
export * from "./legacy-payloads.js";
export * from "./json-sample.js";
export * from "./unavailable.js";
export * from "./connect-errors.js";
export * from "./generation-limits.js";
export * from "./lifecycle.js";
export * from "./endpoint-policy.js";
export * from "./retry-after.js";
export * from "./key-slots.js";
export * from "./int32.js";
export * from "./routing.js";
export * from "./prices.js";
export * from "./tracing.js";
export * from "./experiment-limits.js";
