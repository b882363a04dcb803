import type { ConnectRouter, ServiceImpl } from "@connectrpc/connect";
import { CatalogService } from "@pies/proto/catalog";
import type { CatalogDeps } from "./context.js";
import { environmentHandlers } from "./environments.js";
import { interactionHandlers } from "./interactions.js";
import { promptHandlers } from "./prompts.js";
import { tenancyHandlers } from "./tenancy.js";

/**
 * The catalog's handlers. RPCs without a handler yet (updates, deletes, publishing) answer
 * UNIMPLEMENTED naming the method, as Connect does for any method left out.
 */
export function createCatalogService(
  deps: CatalogDeps,
): Partial<ServiceImpl<typeof CatalogService>> {
  return {
    ...tenancyHandlers(deps),
    ...environmentHandlers(deps),
    ...promptHandlers(deps),
    ...interactionHandlers(deps),
  };
}

export function catalogRoutes(deps: CatalogDeps) {
  return (router: ConnectRouter) => router.service(CatalogService, createCatalogService(deps));
}
