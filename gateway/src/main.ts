import { createLogger, runProcess } from "@pies/common";
import { loadGatewayConfig } from "./config.js";
import { startGateway } from "./start.js";

await runProcess(createLogger("gateway"), () => startGateway(loadGatewayConfig()), "gateway");
