export { startEmbedded, type EmbeddedPies } from "./start.js";
export { createInMemoryPies, type InMemoryPies } from "./wiring.js";
export { loadEmbeddedConfig, type EmbeddedConfig } from "./config.js";
export { edgeConfigSchema, loadEdgeConfig, startEdge, type EdgeConfig } from "./edge.js";
