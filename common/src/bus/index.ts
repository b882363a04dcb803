// @pies/common/bus: the run-event bus — its interface, JetStream (NATS) and in-memory — and the
// catalog's change events (core NATS, and in-memory) with the cache that follows them.
export * from "./bus.js";
export * from "./memory-bus.js";
export * from "./jetstream-bus.js";
export * from "./nats.js";
export * from "./ensure-stream.js";
export * from "./run-records.js";
export * from "./memory-records.js";
export * from "./jetstream-records.js";
export * from "./run-log.js";
export * from "./withheld-payloads.js";
export * from "./catalog-events.js";
export * from "./catalog-cache.js";
export * from "./result-cache.js";
export * from "./run-inputs.js";
export * from "./run-binary.js";
export * from "./run-copy.js";
