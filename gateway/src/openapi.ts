import { isDeepStrictEqual } from "node:util";
import swagger from "@fastify/swagger";
import swaggerUi from "@fastify/swagger-ui";
import type { FastifyInstance, FastifySchemaCompiler, RouteOptions } from "fastify";
import type { FastifySerializerCompiler } from "fastify/types/schema.js";
import type { ZodTypeAny } from "zod";
import { zodToJsonSchema } from "zod-to-json-schema";
import { errorResponse, runResponse } from "./json/responses.js";
import { JSON_NULL } from "./json-body.js";
import type { RouteAuth } from "./routes/context.js";

/**
 * The routes' declarations (fastify-type-provider-zod's ZodTypeProvider types the handlers) and
 * what is made of them: validation of params, query and body, and the OpenAPI 3.1 document.
 */

/**
 * Validation by the route's zod schema. A failure is the ZodError itself: the error handler
 * answers it as every other bad input (400 `invalid_request`, the issues in `details`, errors.ts).
 * An absent body reads as `{}` (a route whose fields are all optional takes no body); a body that
 * is there is checked as it is, so `null`, an array, a string, a number or a boolean where the
 * route takes an object is a 400 like any other wrong type.
 */
export const validatorCompiler: FastifySchemaCompiler<ZodTypeAny> =
  ({ schema, httpPart }) =>
  (data) => {
    const result = schema.safeParse(httpPart === "body" ? bodyOf(data) : data);
    return result.success ? { value: result.data } : { error: result.error };
  };

/** A body as its schema checks it: none (undefined or Fastify's null) is `{}`, JSON null is null. */
const bodyOf = (data: unknown) => (data === JSON_NULL ? null : (data ?? {}));

/**
 * Responses are written with JSON.stringify, as if undeclared: their schemas are for the document
 * (and the tests check responses against it). Checking each response with zod would cost a parse
 * of every run on the hot path (docs/decisions/0015-routes-declared-once.md).
 */
export const serializerCompiler: FastifySerializerCompiler<ZodTypeAny> = () => (data) =>
  JSON.stringify(data);

/** JSON Schema (2020-12 compatible: no draft-07 tuples are declared) of a zod schema. */
export function jsonSchemaOf(schema: ZodTypeAny, io: "input" | "output") {
  const { $schema: _, ...json } = zodToJsonSchema(schema, {
    target: "jsonSchema7",
    $refStrategy: "none",
    // Requests are described as sent (before defaults and transforms), responses as answered.
    pipeStrategy: io,
    effectStrategy: io === "input" ? "input" : "any",
  }) as Record<string, unknown>;
  return json;
}

/** Schemas shown once, under components, and referred to wherever they appear. */
const components = {
  Error: jsonSchemaOf(errorResponse, "output"),
  Run: jsonSchemaOf(runResponse, "output"),
};

const TAGS: [RegExp, string][] = [
  [/^\/api\/v1\/(interactions|execute)/, "interactions"],
  [/^\/api\/v1\/runs/, "runs"],
  [/^\/api\/v1\/prompts/, "prompts"],
  [/^\/api\/v1\/environments/, "environments"],
  [/^\/api\/v1\/(account|projects|apikeys)/, "tenancy"],
  [/\/token\/issue$/, "auth"],
];

/** A route's schema as the document shows it: zod turned to JSON Schema, tags and security added. */
function transform({ schema, url, route }: { schema: any; url: string; route: RouteOptions }) {
  if (!schema || schema.hide) return { schema: { hide: true }, url };
  const { response, headers, querystring, body, params, ...rest } = schema;
  const out: Record<string, unknown> = { ...rest };
  for (const [part, value] of Object.entries({ headers, querystring, body, params })) {
    if (value) out[part] = jsonSchemaOf(value as ZodTypeAny, "input");
  }
  if (response) {
    out.response = Object.fromEntries(
      Object.entries(response).map(([status, value]) => [
        status,
        status === "204"
          ? { type: "null", description: "No content" }
          : isZod(value)
            ? jsonSchemaOf(value, "output")
            : withContent(value as { content: Record<string, { schema: ZodTypeAny }> }),
      ]),
    );
  }
  const auth = (route.config as { auth?: RouteAuth } | undefined)?.auth;
  if (url.startsWith("/api/v1/") && auth !== "public") {
    out.security = auth === "stream" ? [{ bearer: [] }, { access_token: [] }] : [{ bearer: [] }];
  }
  out.tags ??= [TAGS.find(([pattern]) => pattern.test(url))?.[1] ?? "operations"];
  return { schema: out, url };
}

const isZod = (value: unknown): value is ZodTypeAny =>
  typeof value === "object" && value !== null && "safeParse" in value;

/** A response declared per content type (`{description, content: {type: {schema}}}`). */
function withContent(response: { content: Record<string, { schema: ZodTypeAny }> }) {
  const content = Object.fromEntries(
    Object.entries(response.content).map(([type, { schema }]) => [
      type,
      { schema: jsonSchemaOf(schema, "output") },
    ]),
  );
  return { ...response, content };
}

/** Replaces every copy of a component's schema by a reference to it. */
function referToComponents({ openapiObject }: { openapiObject: Record<string, any> }) {
  const names = Object.entries(components);
  const replace = (value: unknown, top: boolean): unknown => {
    if (value === null || typeof value !== "object") return value;
    if (!top) {
      const named = names.find(([, schema]) => isDeepStrictEqual(schema, value));
      if (named) return { $ref: `#/components/schemas/${named[0]}` };
    }
    if (Array.isArray(value)) return value.map((v) => replace(v, false));
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, replace(v, false)]));
  };
  return {
    ...openapiObject,
    paths: replace(openapiObject.paths, true),
    components: { ...openapiObject.components, schemas: { ...components } },
  };
}

/**
 * `GET /api/v1/openapi.json` (OpenAPI 3.1 of every route, made once, at the first request) and a
 * reference page at `/docs` (Swagger UI, served from the package's own files: no CDN). Neither
 * needs a key: they describe the API, not a tenant's data. Registered before the routes, so that
 * it sees each one.
 */
export function installOpenApi(app: FastifyInstance, version: string) {
  void app.register(swagger, {
    openapi: {
      openapi: "3.1.0",
      info: {
        title: "pies",
        version,
        description:
          "Prompt Interaction Execution Service. Authenticate with `Authorization: Bearer <sk- API key>`, " +
          "or with the JWT that `POST /token/issue` exchanges a key for. Every error has the shape of " +
          "`#/components/schemas/Error`.",
      },
      components: {
        securitySchemes: {
          bearer: {
            type: "http",
            scheme: "bearer",
            description: "An API key (`sk-…`) or a JWT from `POST /token/issue`",
          },
          access_token: {
            type: "apiKey",
            in: "query",
            name: "access_token",
            description: "The stream endpoint only (a browser EventSource cannot set headers)",
          },
        },
      },
    },
    transform,
    transformObject: referToComponents as never,
  });
  // The page reads the same document at /docs/json. No "valid" badge (validatorUrl is null by
  // default): it would ask validator.swagger.io, on the internet.
  void app.register(swaggerUi, { routePrefix: "/docs" });
}
