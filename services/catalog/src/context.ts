import type { Kysely } from "kysely";
import type { EndpointPolicy, Logger } from "@pies/common";
import type { CatalogEvents } from "@pies/common/bus";
import type { CatalogDatabase } from "./tables.js";
import type { SecretBox } from "./secrets.js";

/** What the catalog's handlers are built over. */
export interface CatalogDeps {
  db: Kysely<CatalogDatabase>;
  secrets: SecretBox;
  logger: Logger;
  /** Where an environment's endpoint_url may point. */
  endpoints: EndpointPolicy;
  /**
   * Where a change event goes after every successful write (NATS, or in memory when embedded).
   * Absent only where no process caches what the catalog answers (the CLI, which writes to the
   * database directly and only ever creates accounts, projects and keys).
   */
  events?: CatalogEvents;
}
