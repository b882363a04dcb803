import { createLogger, runProcess } from "@pies/common";
import { loadCatalogConfig } from "./config.js";
import { startCatalog } from "./start.js";

await runProcess(createLogger("catalog"), () => startCatalog(loadCatalogConfig()), "catalog");
