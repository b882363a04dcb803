import { createLogger, exitOnStartupError, onShutdown } from "@pies/common";
import { loadExecutorConfig } from "./config.js";
import { startExecutor } from "./start.js";

const logger = createLogger("executor");
try {
  const executor = await startExecutor(loadExecutorConfig());
  onShutdown(logger, () => executor.stop());
} catch (err) {
  exitOnStartupError(logger)(err);
}
