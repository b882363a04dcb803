export * from "./fake-openai.js";
export * from "./postgres.js";
export * from "./nats.js";
export * from "./processes.js";
export * from "./sse.js";
export * from "./servers.js";
export * from "./load.js";
