import { createLogger, exitOnStartupError, onShutdown } from "@pies/common";
import { loadGatewayConfig } from "./config.js";
import { startGateway } from "./start.js";

const logger = createLogger("gateway");
try {
  const gateway = await startGateway(loadGatewayConfig());
  onShutdown(logger, () => gateway.stop());
} catch (err) {
  exitOnStartupError(logger)(err);
}
