export { startEmbedded, type EmbeddedPies } from "./start.js";
export { createInMemoryPies, type InMemoryPies } from "./wiring.js";
export { loadEmbeddedConfig, type EmbeddedConfig } from "./config.js";
