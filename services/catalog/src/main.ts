import { createLogger, exitOnStartupError, onShutdown } from "@pies/common";
import { loadCatalogConfig } from "./config.js";
import { startCatalog } from "./start.js";

const logger = createLogger("catalog");
try {
  const catalog = await startCatalog(loadCatalogConfig());
  onShutdown(logger, () => catalog.stop());
} catch (err) {
  exitOnStartupError(logger)(err);
}
