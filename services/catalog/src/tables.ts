import type { ColumnType, Generated, Selectable } from "kysely";
import type { JsonObject, JsonValue } from "@pies/common";

type CreatedAt = ColumnType<Date, Date | string | undefined, never>;
type UpdatedAt = ColumnType<Date, Date | string | undefined, Date | string>;
type Json<T = JsonValue> = ColumnType<T, string, string>;

export interface AccountsTable {
  id: string;
  name: string;
  created_at: CreatedAt;
}

export interface ProjectsTable {
  id: string;
  account_id: string;
  name: string;
  /** Days its runs are kept, when fewer than the deployment's retention; 0: the deployment's. */
  retention_days: ColumnType<number, number | undefined, number>;
  created_at: CreatedAt;
}

export interface ApiKeysTable {
  id: string;
  project_id: string;
  account_id: string;
  name: string;
  key_hash: string;
  key_hint: string;
  /** admin | member */
  role: string;
  created_at: CreatedAt;
  revoked_at: Date | null;
}

export interface EnvironmentsTable {
  id: string;
  project_id: string;
  name: string;
  provider: string;
  endpoint_url: string;
  api_key_enc: string | null;
  api_key_hint: string;
  default_model: string;
  enabled_models: Json<string[]>;
  config: Json<JsonObject>;
  created_at: CreatedAt;
  updated_at: UpdatedAt;
}

export interface PromptsTable {
  id: string;
  project_id: string;
  name: string;
  role: string;
  content_type: string;
  content: string;
  test_data: Json<JsonObject | null>;
  input_schema: Json<JsonObject | null>;
  status: Generated<string>;
  version: Generated<number>;
  latest: Generated<boolean>;
  created_at: CreatedAt;
  updated_at: UpdatedAt;
}

/** A prompt segment as stored: the template is embedded only in published snapshots. */
export interface StoredSegment {
  id: string;
  type: string;
  template_id: string;
  chat_path?: string;
  template?: Selectable<PromptsTable>;
}

export interface InteractionsTable {
  id: string;
  project_id: string;
  name: string;
  description: string;
  status: string;
  test_data: Json<JsonObject | null>;
  result_schema: Json<JsonObject | null>;
  cache_policy: Json<JsonObject | null>;
  model: string;
  temperature: number | null;
  max_tokens: number | null;
  environment_id: string | null;
  prompts: Json<StoredSegment[]>;
  tags: string[];
  visibility: Generated<string>;
  version: Generated<number>;
  latest: Generated<boolean>;
  parent_id: string | null;
  /** The interaction or version this draft was forked from. */
  forked_from: string | null;
  formatter: string;
  /** What the runs store keeps of its runs: full | metadata. */
  store: Generated<string>;
  created_at: CreatedAt;
  updated_at: UpdatedAt;
}

export interface CatalogDatabase {
  "catalog.accounts": AccountsTable;
  "catalog.projects": ProjectsTable;
  "catalog.api_keys": ApiKeysTable;
  "catalog.environments": EnvironmentsTable;
  "catalog.prompts": PromptsTable;
  "catalog.interactions": InteractionsTable;
}

export type InteractionRow = Selectable<InteractionsTable>;
export type PromptRow = Selectable<PromptsTable>;
export type EnvironmentRow = Selectable<EnvironmentsTable>;
