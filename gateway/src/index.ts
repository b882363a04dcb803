export { createGateway } from "./app.js";
export type { GatewayDeps, GatewayOptions } from "./deps.js";
export {
  gatewayConfigSchema,
  gatewaySettingsSchema,
  loadGatewayConfig,
  loadGatewaySettings,
  gatewayOptions,
  type GatewayConfig,
} from "./config.js";
export { startGateway, type GatewayProcess } from "./start.js";
export { closeGracefully } from "./drain.js";
export { tokenKeyFrom } from "./tokens.js";
export { consoleDistDir } from "./console.js";
