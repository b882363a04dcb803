import type { Migration } from "kysely";
import * as initial from "./2026-11-22T00-00_initial.js";
import * as apiKeyRoles from "./2026-11-22T02-00_api_key_roles.js";
import * as versions from "./2026-11-23T20-00_versions.js";
import * as versionFilters from "./2026-11-28T00-00_version_filters.js";
import * as forks from "./2026-11-28T04-00_forks.js";
import * as projectRetention from "./2026-12-07T06-00_project_retention.js";
import * as interactionStore from "./2026-12-07T12-00_interaction_store.js";

/** Every migration of the catalog schema, by name (names sort in the order they apply). */
export const migrations: Record<string, Migration> = {
  "2026-11-22T00-00_initial": initial,
  "2026-11-22T02-00_api_key_roles": apiKeyRoles,
  "2026-11-23T20-00_versions": versions,
  "2026-11-28T00-00_version_filters": versionFilters,
  "2026-11-28T04-00_forks": forks,
  "2026-12-07T06-00_project_retention": projectRetention,
  "2026-12-07T12-00_interaction_store": interactionStore,
};
