import type { Kysely } from "kysely";
import type { EndpointPolicy, Logger } from "@pies/common";
import type { CatalogDatabase } from "./tables.js";
import type { SecretBox } from "./secrets.js";

/** What the catalog's handlers are built over. */
export interface CatalogDeps {
  db: Kysely<CatalogDatabase>;
  secrets: SecretBox;
  logger: Logger;
  /** Where an environment's endpoint_url may point. */
  endpoints: EndpointPolicy;
}
