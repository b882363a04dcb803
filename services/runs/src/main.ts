import { createLogger, exitOnStartupError, onShutdown } from "@pies/common";
import { loadRunsConfig } from "./config.js";
import { startRuns } from "./start.js";

const logger = createLogger("runs");
try {
  const runs = await startRuns(loadRunsConfig());
  onShutdown(logger, () => runs.stop());
} catch (err) {
  exitOnStartupError(logger)(err);
}
