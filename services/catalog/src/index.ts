export { createCatalogService, catalogRoutes } from "./service.js";
export type { CatalogDeps } from "./context.js";
export { migrations as catalogMigrations } from "./migrations/index.js";
export { SecretBox } from "./secrets.js";
export { seedAccount, type Seeded } from "./seed.js";
export type { CatalogDatabase } from "./tables.js";
export { catalogConfigSchema, loadCatalogConfig, type CatalogConfig } from "./config.js";
export { startCatalog, type CatalogProcess } from "./start.js";
