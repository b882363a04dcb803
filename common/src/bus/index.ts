// @pies/common/bus: the run-event bus — its interface, JetStream (NATS) and in-memory.
export * from "./bus.js";
export * from "./memory-bus.js";
export * from "./jetstream-bus.js";
export * from "./nats.js";
export * from "./run-records.js";
export * from "./memory-records.js";
export * from "./jetstream-records.js";
export * from "./run-log.js";
