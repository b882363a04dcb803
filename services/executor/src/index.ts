export { createExecutorService, executorRoutes } from "./service.js";
export { startExecutorWork, type ExecutorWork } from "./work.js";
export { createExecutorDeps, type ExecutorSettings } from "./deps.js";
export type { ExecutorDeps } from "./context.js";
export {
  executorConfigSchema,
  executorSettingsSchema,
  loadExecutorConfig,
  type ExecutorConfig,
} from "./config.js";
export {
  connectExecutor,
  startExecutor,
  type ConnectedExecutor,
  type ExecutorProcess,
  type ExecutorWiringConfig,
} from "./start.js";
export { loadTokenizer } from "./providers/tokens.js";
export { registerRouteMetrics, serveExecutorMetrics } from "./metrics.js";
