import { z } from "zod";
import { apiKeyRoleNames, interactionStatuses, visibilities } from "@pies/proto/catalog";
import { runStatuses, runStores } from "@pies/proto/runs";

/**
 * The response bodies of the REST API, as declared to Fastify for the OpenAPI document
 * (openapi.ts). They describe what the `*Json` functions of this folder write (and, for the runs of
 * GET /runs and POST /runs/search, what @pies/common's restRunJson writes in the runs service, which
 * the gateway sends as it is); responses are not
 * checked against them at run time (the serializer is JSON.stringify), the tests do that against
 * the published document (gateway/src/openapi.test.ts).
 */

const date = z.string().datetime({ offset: true });
const anyJson = z.unknown();
const jsonObject = z.record(z.string(), z.unknown());
const status = z.enum(interactionStatuses.names);
const visibility = z.enum(visibilities.names);
const store = z
  .enum(runStores.names)
  .describe(
    "What the runs store keeps of the interaction's runs: `full`, or `metadata` (no parameters, prompt or result)",
  );

/** DESIGN.md §10: every error. */
export const errorResponse = z
  .object({
    error: z.string().describe("The HTTP reason phrase"),
    status: z.number().int().describe("The HTTP status, as in the status line"),
    code: z.string().describe("A stable, machine-readable code: not_found, invalid_request, …"),
    message: z.string().describe("What went wrong, for a human"),
    details: anyJson.optional().describe("More about it: validation issues, a failed run's id…"),
  })
  .describe("An error (DESIGN.md §10)");

export const idParams = z.object({ id: z.string().min(1) });

/** A template as answered (GET /prompts/:id, or expanded inside an interaction). */
export const promptResponse = z.object({
  id: z.string(),
  name: z.string(),
  role: z.string(),
  content_type: z.string(),
  content: z.string(),
  status,
  latest: z.boolean(),
  version: z.number().int(),
  test_data: jsonObject.optional(),
  inputSchema: jsonObject.optional(),
  project: z.string(),
  created_at: date.optional(),
  updated_at: date.optional(),
});

const segment = z.object({
  id: z.string(),
  type: z.string(),
  template: z.union([z.string(), promptResponse]).optional(),
  chat_path: z.string().optional(),
});

export const interactionResponse = z.object({
  id: z.string(),
  name: z.string(),
  description: z.string(),
  status,
  test_data: jsonObject.optional(),
  resultSchema: jsonObject.optional(),
  cache_policy: z
    .object({
      type: z.string(),
      ttl: z.number().int().optional(),
      varies_on: z.array(z.string()),
      refresh_probability: z.number().optional(),
    })
    .optional(),
  model: z.string().optional(),
  temperature: z.number().optional(),
  max_tokens: z.number().int().optional(),
  prompts: z.array(segment),
  environment: z.string().optional(),
  project: z.string(),
  version: z.number().int(),
  latest: z.boolean(),
  visibility,
  tags: z.array(z.string()),
  parent: z.string().optional(),
  formatter: z.string().optional(),
  store,
  created_at: date.optional(),
  updated_at: date.optional(),
});

/** An interaction in a list; a published version carries its version fields too. */
export const interactionRefResponse = z.object({
  id: z.string(),
  name: z.string(),
  description: z.string(),
  status,
  prompts: z.array(segment),
  store: store.optional().describe("`metadata` for a metadata-only interaction; absent otherwise"),
  updated_at: date.optional(),
  latest: z.boolean().optional(),
  version: z.number().int().optional(),
  parent: z.string().optional(),
  created_at: date.optional(),
});

/** A tag in use (GET /interactions/tags), with the interactions and versions that carry it. */
export const interactionTagResponse = z.object({
  tag: z.string(),
  count: z.number().int().describe("Interactions (drafts) and published versions carrying it"),
  interactions: z.array(
    interactionRefResponse.extend({
      version: z.number().int().describe("0 for a draft"),
      tags: z.array(z.string()),
    }),
  ),
});

export const resolvedInteractionResponse = z.object({
  id: z.string(),
  name: z.string(),
  version: z.number().int().describe("0 for a draft"),
  status,
  tags: z.array(z.string()),
  resolved: z.object({
    environment: z
      .object({ id: z.string(), name: z.string(), provider: z.string() })
      .optional()
      .describe("Absent when neither the interaction nor the request names one"),
    model: z.string().optional(),
    model_source: z
      .string()
      .optional()
      .describe("Where the model comes from: config, interaction or environmentDefault"),
  }),
});

export const versionRefResponse = z.object({
  id: z.string(),
  name: z.string(),
  status,
  latest: z.boolean(),
  version: z.number().int(),
  visibility,
  tags: z.array(z.string()),
  parent: z.string(),
  store: store.optional().describe("`metadata` for a metadata-only version; absent otherwise"),
  created_at: date.optional(),
  updated_at: date.optional(),
});

export const environmentResponse = z.object({
  id: z.string(),
  name: z.string(),
  provider: z.string(),
  endpoint_url: z.string(),
  api_key_hint: z.string().optional().describe("The provider key is never returned, only a hint"),
  default_model: z.string(),
  enabled_models: z.array(z.string()),
  config: jsonObject,
  project: z.string(),
  created_at: date.optional(),
  updated_at: date.optional(),
});

export const modelsResponse = z.object({
  models: z.array(z.string()),
  source: z
    .string()
    .describe("Where the list comes from: `provider` (its model list) or `enabled_models`"),
});

const named = z.object({ id: z.string(), name: z.string() });

export const accountResponse = z.object({
  id: z.string(),
  name: z.string(),
  created_at: date.optional(),
  project: named,
  key: z.object({ id: z.string(), name: z.string(), role: z.string() }),
});

export const projectResponse = z.object({
  id: z.string(),
  name: z.string(),
  account: z.string(),
  retention_days: z
    .number()
    .int()
    .describe("Days its runs are kept, when fewer than the deployment keeps them; 0: as it does"),
  created_at: date.optional(),
});

export const apiKeyResponse = z.object({
  id: z.string(),
  name: z.string(),
  hint: z.string(),
  role: z.enum(apiKeyRoleNames as [string, ...string[]]),
  project: z.string(),
  account: z.string(),
  created_at: date.optional(),
});

export const apiKeyCreatedResponse = apiKeyResponse.extend({
  key: z.string().describe("The secret: answered once, here, and never again"),
});

export const projectCreatedResponse = projectResponse.extend({
  api_key: apiKeyCreatedResponse.describe("An admin key of the new project"),
});

const tokenUse = z.object({
  prompt: z.number().int(),
  result: z.number().int(),
  total: z.number().int(),
});
const runError = z.object({ code: z.string(), message: z.string(), data: anyJson.optional() });

/** The interaction a run executed (SPEC.md's reference object), as it was at the execution. */
const runInteraction = z
  .object({
    id: z.string(),
    name: z.string(),
    status: status.optional().describe("Absent on runs recorded before runs carried it"),
    prompts: z
      .array(
        z.object({
          id: z.string(),
          type: z.string(),
          template: z.string().optional().describe("The template's id"),
          chat_path: z.string().optional(),
        }),
      )
      .optional(),
    updated_at: date.optional(),
  })
  .describe("The interaction (or version) executed: {id, name, status, prompts, updated_at}");

export const runResponse = z.object({
  id: z.string(),
  status: z.enum(runStatuses.names),
  interaction: runInteraction,
  environment: named,
  modelId: z.string(),
  parameters: jsonObject.describe("The input data"),
  result: anyJson.optional(),
  prompt: anyJson.optional(),
  store: z
    .enum(runStores.names)
    .optional()
    .describe(
      "`metadata` for a run of a metadata-only interaction: its parameters, prompt and result are not stored (only its caller's answer carries them); absent for a run stored whole",
    ),
  tags: z.array(z.string()),
  config: z.object({
    environment: z.string().optional(),
    model: z.string().optional(),
    formatter: z.string().optional(),
    temperature: z.number().optional(),
    max_tokens: z.number().int().optional(),
  }),
  temperature: z.number().optional(),
  max_tokens: z.number().int().optional(),
  token_use: tokenUse.optional(),
  execution_time: z.number().optional().describe("Milliseconds"),
  error: runError.optional(),
  source: z
    .object({
      type: z.string(),
      label: z.string(),
      principal_type: z.string(),
      principal_id: z.string(),
      client_ip: z.string(),
    })
    .optional(),
  ttl: z.number().int().optional().describe("Seconds a streamed run's events are kept"),
  stream: z.boolean(),
  parent: z.string().optional(),
  account: named,
  project: named,
  cached: z.boolean().optional(),
  cached_from: z.string().optional(),
  cache_policy: jsonObject.optional(),
  attempts: z
    .array(
      z.object({
        number: z.number().int(),
        prompt_added: anyJson,
        error: runError.optional(),
        token_use: tokenUse.optional(),
        environment: z.string().optional().describe("The environment tried (virtual environments)"),
        model: z.string().optional(),
        duration_ms: z.number().optional(),
      }),
    )
    .optional(),
  cost: z
    .object({
      input: z.number(),
      output: z.number(),
      total: z.number(),
      currency: z.string(),
      estimated: z.boolean().describe("The tokens were counted by the tokenizer"),
    })
    .optional()
    .describe("From the token use and the model's price; absent when the model has none"),
  created_at: date.optional(),
  updated_at: date.optional(),
});

export const searchRunsResponse = z.object({
  results: z.array(runResponse).optional().describe("Absent when onlyMeta is true"),
  meta: z
    .object({
      count: z
        .object({
          total: z.number().int().optional().describe("The runs that match"),
          lower_bound: z
            .number()
            .int()
            .optional()
            .describe(
              "In place of total: at least this many match (counting stopped; exactTotal counts them all)",
            ),
        })
        .describe("`total`, or `lower_bound` past 10,000 matches counted over the runs"),
      facet: z
        .record(
          z.string(),
          z.object({
            buckets: z.array(
              z.object({
                _id: z.union([z.string(), z.number()]),
                count: z.number().int(),
                name: z.string().optional().describe("An interaction's or environment's name"),
              }),
            ),
          }),
        )
        .optional(),
    })
    .optional()
    .describe("Present when facets were asked for"),
});

const facetBucket = z.object({
  _id: z.string(),
  count: z.number().int(),
  name: z.string().optional().describe("An interaction's or environment's name"),
});

export const runFacetsResponse = z
  .record(z.string(), z.union([z.array(facetBucket), z.number().int()]))
  .describe("Each facet's buckets under its name, and `total`: the runs that match");

export const filterOptionsResponse = z.array(
  z.object({
    id: z.string(),
    name: z.string().describe("An interaction's or environment's name; else the value"),
    count: z.number().int(),
  }),
);

export const tokenResponse = z.object({
  token: z.string().describe("A JWT, accepted as `Authorization: Bearer` until it expires"),
  expires_at: date,
});

/** 204: no body (the document says so with `type: "null"`, openapi.ts). */
export const noContent = z.void();

export const healthResponse = z.object({ status: z.string() });

export const openApiResponse = z
  .object({
    openapi: z.literal("3.1.0"),
    info: z.object({ title: z.string(), version: z.string() }).passthrough(),
    paths: z.record(z.string(), z.unknown()),
    components: z.record(z.string(), z.unknown()),
  })
  .passthrough()
  .describe("An OpenAPI 3.1 document");
