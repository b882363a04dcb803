import { createLogger, runProcess } from "@pies/common";
import { loadEdgeConfig, startEdge } from "./edge.js";

await runProcess(createLogger("edge"), () => startEdge(loadEdgeConfig()), "edge");
