// @pies/common/server: the Connect server over HTTP/2, the health service and client transports.
export * from "./server.js";
export * from "./health.js";
export * from "./client.js";
export * from "./internal-auth.js";
export * from "./direct.js";
export * from "./metrics-server.js";
