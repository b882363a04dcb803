import { createLogger, runProcess } from "@pies/common";
import { loadExecutorConfig } from "./config.js";
import { startExecutor } from "./start.js";

await runProcess(createLogger("executor"), () => startExecutor(loadExecutorConfig()), "executor");
