import type { FastifyInstance } from "fastify";
import type { ZodTypeProvider } from "fastify-type-provider-zod";
import { z } from "zod";
import { answered, jsonOf, MIN_MAX_TOKENS, TEMPERATURE_RANGE, type JsonValue } from "@pies/common";
import { RunStatus } from "@pies/proto/runs";
import { int32, shortText } from "../json/limits.js";
import { errorResponse, idParams } from "../json/responses.js";
import { callerGone, callerOf, principalOf, type RouteContext } from "./context.js";
import { failedAsError } from "./runs.js";

/** POST /interactions/:id/generate-test-data (SPEC.md): objects valid against its input schema. */
export function testDataRoutes(instance: FastifyInstance, ctx: RouteContext) {
  const app = instance.withTypeProvider<ZodTypeProvider>();
  const limits = ctx.deps.options;
  const body = z
    .object({
      count: z.number().int().min(1).max(50).optional(),
      message: z.string().max(10_000).optional(),
      config: z
        .object(
          {
            environment: shortText(limits).min(1),
            model: shortText(limits).optional(),
            temperature: z
              .number()
              .min(TEMPERATURE_RANGE.min)
              .max(TEMPERATURE_RANGE.max)
              .optional(),
            max_tokens: int32(MIN_MAX_TOKENS).optional(),
            formatter: z.union([shortText(limits), z.number()]).optional(),
            max_repairs: z.number().int().min(0).max(5).optional(),
          },
          { required_error: "Required (the environment to generate with)" },
        )
        .passthrough(),
    })
    .passthrough();

  app.post(
    "/interactions/:id/generate-test-data",
    {
      schema: {
        summary: "Generate input data valid against the interaction's input schema",
        params: idParams,
        body,
        response: {
          200: z.array(z.unknown()).describe("`count` items valid against the input schema"),
          502: errorResponse.describe("The provider failed; the run is recorded, `details.run_id`"),
          504: errorResponse.describe(
            "The provider timed out; the run is recorded, `details.run_id`",
          ),
          default: errorResponse,
        },
      },
    },
    async (request, reply) => {
      const b = request.body;
      const { run, itemsJson } = await ctx.deps.executor.generateTestData(
        {
          caller: callerOf(request, principalOf(request)),
          interactionId: request.params.id,
          count: b.count ?? 1,
          message: b.message ?? "",
          config: {
            environmentId: b.config.environment,
            model: b.config.model ?? "",
            temperature: b.config.temperature,
            maxTokens: b.config.max_tokens,
            maxRepairs: b.config.max_repairs,
            formatter: b.config.formatter === undefined ? "" : String(b.config.formatter),
          },
        },
        { signal: callerGone(reply) },
      );
      const recorded = answered(run, "run");
      // A failed generation answers like a failed blocking execution (502/504, the run's id).
      if (recorded.status !== RunStatus.COMPLETED) return failedAsError(recorded, reply);
      return (jsonOf(itemsJson) ?? []) as JsonValue[];
    },
  );
}
