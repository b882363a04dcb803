import type { IndexBuild } from "@pies/common/db";
import { SEARCH_TEXT } from "../lucene.js";

/**
 * The runs table's search indexes, built concurrently once the service serves (buildIndexes):
 * building them inside a migration would block the record writer's inserts for as long as the
 * build takes on a large table. Each is a name: an index changes by a new name (and `replaces`).
 */
export const indexBuilds: readonly IndexBuild[] = [
  // Lucene terms with a path compile to `parameters @? <jsonpath>` tests, which a GIN index with
  // jsonb_path_ops serves (equality at a path; smaller and cheaper to maintain than jsonb_ops),
  // under the project (btree_gin's operator class for text): one index scan yields the project's
  // candidates only, where the index of the input data alone was ANDed with a bitmap of every run
  // of the project, a week's partition of them at a time (docs/decisions/0071). It replaces
  // that index, which a database without btree_gin keeps (or gets).
  {
    name: "runs_project_parameters_idx",
    table: "runs.runs",
    extensions: ["btree_gin"],
    definition: () => "using gin (project_id, parameters jsonb_path_ops)",
    replaces: ["runs_parameters_idx"],
    otherwise: {
      name: "runs_parameters_idx",
      table: "runs.runs",
      definition: () => "using gin (parameters jsonb_path_ops)",
    },
  },
  // The project's index in the default order, covering what the facets group by and the range
  // filters test (status, model, execution time, cost; updated_at is in the key): facets over a
  // project are an index-only scan. It replaces the indexes of the same key.
  {
    name: "runs_project_updated_cost_cover_idx",
    table: "runs.runs",
    definition: () =>
      "(project_id, updated_at desc, id desc) include (status, model_id, execution_time, cost_total)",
    replaces: ["runs_project_updated_idx", "runs_project_updated_cover_idx"],
  },
  // Trigrams of the input data's strings (SEARCH_TEXT: its strings as a JSON array), under the
  // project: what the jsonpath index cannot serve (wildcards, bare terms over any value, string
  // ranges) also compiles to `<SEARCH_TEXT> like <pattern>`, a condition every match meets, which
  // this index serves with the project's id in the same index condition (btree_gin's operator
  // class for text): the candidates it yields are the caller's project's only, so a search does
  // not cost more, nor take longer, as other projects' data grows. The jsonpath test keeps the
  // answer exact. Keys, numbers, booleans and JSON's syntax are not in it (no pattern looks for
  // them): fewer trigrams for the record writer to add with each row. It replaces the trigram
  // indexes of the input data's whole text (`parameters::text`), under the project and over
  // every project.
  {
    name: "runs_project_strings_trgm_idx",
    table: "runs.runs",
    extensions: ["pg_trgm", "btree_gin"],
    definition: (ext) => `using gin (project_id, (${SEARCH_TEXT}) ${ext}.gin_trgm_ops)`,
    replaces: ["runs_parameters_trgm_idx", "runs_project_parameters_trgm_idx"],
  },
];
