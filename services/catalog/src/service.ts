import type { ConnectRouter, ServiceImpl } from "@connectrpc/connect";
import { CatalogService } from "@pies/proto/catalog";
import { publishingChanges } from "./changes.js";
import type { CatalogDeps } from "./context.js";
import { environmentHandlers } from "./environments.js";
import { interactionHandlers } from "./interactions.js";
import { promptHandlers } from "./prompts.js";
import { tenancyHandlers } from "./tenancy.js";

/**
 * The catalog's handlers. RPCs without a handler yet (updates, deletes, publishing) answer
 * UNIMPLEMENTED naming the method, as Connect does for any method left out. Every write that
 * succeeds publishes a change event (`publishingChanges`), whoever wrote its handler.
 */
export function createCatalogService(
  deps: CatalogDeps,
): Partial<ServiceImpl<typeof CatalogService>> {
  const handlers = {
    ...tenancyHandlers(deps),
    ...environmentHandlers(deps),
    ...promptHandlers(deps),
    ...interactionHandlers(deps),
  };
  return deps.events ? publishingChanges(handlers, deps.events, deps.logger) : handlers;
}

export function catalogRoutes(deps: CatalogDeps) {
  return (router: ConnectRouter) => router.service(CatalogService, createCatalogService(deps));
}
