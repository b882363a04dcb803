export { createGateway } from "./app.js";
export type { GatewayDeps, GatewayOptions } from "./deps.js";
export {
  gatewayConfigSchema,
  loadGatewayConfig,
  gatewayOptions,
  type GatewayConfig,
} from "./config.js";
export { startGateway, type GatewayProcess } from "./start.js";
export { startEmbedded, type EmbeddedPies } from "./embedded/start.js";
export { createInMemoryPies, type InMemoryPies } from "./embedded/wiring.js";
