// @ts-check
// The real gateway of a bench, in its own process, in front of a stub of the other services.

/** @import { ConnectRouter } from "@connectrpc/connect" */

/**
 * Tells the parent (the bench that forked this process, with an IPC channel) something.
 * @param {unknown} message
 */
function toParent(message) {
  if (!process.send) throw new Error("not forked by a bench: no IPC channel to the parent");
  process.send(message);
}

/** The member key's principal that the stubs' catalog answers for every key. */
export async function benchPrincipal() {
  const { create } = await import("@bufbuild/protobuf");
  const { ApiKeyRole, PrincipalSchema } = await import("@pies/proto/catalog");
  return create(PrincipalSchema, {
    accountId: "acc_0123456789abcdef",
    projectId: "prj_0123456789abcdef",
    apiKeyId: "key_0123456789abcdef",
    apiKeyName: "bench",
    accountName: "acme",
    projectName: "default",
    role: ApiKeyRole.MEMBER,
  });
}

/**
 * The stub: a real Connect HTTP/2 server (serveConnect) with the given routes, in this process;
 * tells the parent its URL and stops when the parent disconnects.
 * @param {(router: ConnectRouter) => void} routes
 */
export async function serveBenchStub(routes) {
  const { serveConnect } = await import("@pies/common/server");
  const { createLogger } = await import("@pies/common");
  const server = await serveConnect({
    name: "stub",
    host: "127.0.0.1",
    port: 0,
    logger: createLogger("stub", "silent"),
    serviceNames: [],
    isReady: async () => true,
    routes,
  });
  toParent({ url: server.url });
  process.on("disconnect", () => void server.close(0).then(() => process.exit(0)));
}

/**
 * Starts the gateway built in `build` (a directory holding gateway/src's build: app.js, config.js)
 * against the Connect stub at `stubUrl`, tells the parent its URL, answers "cpu" messages with its
 * CPU time so far, and closes (rather than being killed: --cpu-prof writes its profile then) when
 * the parent disconnects. `rateLimitPerMinute` 0 turns the rate limit off.
 * @param {object} options
 * @param {string} options.build
 * @param {string} options.stubUrl
 * @param {number} options.rateLimitPerMinute
 */
export async function serveBenchGateway({ build, stubUrl, rateLimitPerMinute }) {
  // A build given at run time, maybe of another version of gateway/src: its modules are whatever
  // that build exports (typed any), not this tree's declarations.
  const { createGateway } = await import(`${build}/app.js`);
  const config = await import(`${build}/config.js`);
  const { gatewayOptions } = config;
  // Builds from before the internal credential have no loadGatewaySettings.
  const loadGatewaySettings = config.loadGatewaySettings ?? config.loadGatewayConfig;
  const { createLogger } = await import("@pies/common");
  const { MemoryCatalogEvents, MemoryRunEventBus } = await import("@pies/common/bus");
  const { peerTransport, serviceClient } = await import("@pies/common/server");
  const { CatalogService } = await import("@pies/proto/catalog");
  const { ExecutorService } = await import("@pies/proto/executor");
  const { RunsService } = await import("@pies/proto/runs");
  const app = createGateway({
    catalog: serviceClient(CatalogService, peerTransport(stubUrl, "catalog")),
    runs: serviceClient(RunsService, peerTransport(stubUrl, "runs")),
    executor: serviceClient(ExecutorService, peerTransport(stubUrl, "executor")),
    bus: new MemoryRunEventBus(),
    catalogEvents: new MemoryCatalogEvents(),
    logger: createLogger("gateway", "warn"),
    isReady: async () => true,
    options: gatewayOptions(
      loadGatewaySettings({ PIES_RATE_LIMIT_PER_MINUTE: String(rateLimitPerMinute) }),
    ),
    tokenKey: new Uint8Array(32).fill(1),
  });
  const url = await app.listen({ host: "127.0.0.1", port: 0 });
  process.on("message", (msg) => {
    if (msg === "cpu") {
      const { user, system } = process.cpuUsage();
      toParent({
        cpuUs: user + system,
        systemUs: system,
        atUs: Number(process.hrtime.bigint() / 1000n),
      });
    }
  });
  process.on("disconnect", () => void app.close().then(() => process.exit(0)));
  toParent({ url });
}
