import { createLogger, runProcess } from "@pies/common";
import { loadRunsConfig } from "./config.js";
import { startRuns } from "./start.js";

await runProcess(createLogger("runs"), () => startRuns(loadRunsConfig()), "runs");
