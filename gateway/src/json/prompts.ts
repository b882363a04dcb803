import { z } from "zod";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { PromptTemplate, PromptTemplateInputSchema } from "@pies/proto/catalog";
import { jsonOf, type JsonObject } from "@pies/common";
import { compact, iso, jsonObject, payloadBytes, statusNameOf } from "./common.js";
import { shortText, type InputLimits } from "./limits.js";

/** The body of POST /prompts, within the limits. */
export const promptBody = (limits: InputLimits) =>
  z
    .object({
      name: shortText(limits).optional(),
      role: shortText(limits).optional(),
      content_type: shortText(limits).optional(),
      content: z.string().optional(),
      test_data: jsonObject.nullish(),
      inputSchema: jsonObject.nullish(),
      input_schema: jsonObject.nullish(),
    })
    .passthrough();

/** A prompt body as input; on update (`updating`) a null test_data or inputSchema clears it. */
export function promptInput(
  body: z.infer<ReturnType<typeof promptBody>>,
  updating = false,
): MessageInitShape<typeof PromptTemplateInputSchema> {
  const schema = body.inputSchema !== undefined ? body.inputSchema : body.input_schema;
  const cleared = (v: object | null | undefined) => (v === null ? (updating ? {} : undefined) : v);
  return compact({
    name: body.name,
    role: body.role,
    contentType: body.content_type,
    content: body.content,
    testDataJson: payloadBytes(cleared(body.test_data)),
    inputSchemaJson: payloadBytes(cleared(schema)),
  });
}

export function promptJson(p: PromptTemplate) {
  return compact({
    id: p.id,
    name: p.name,
    role: p.role,
    content_type: p.contentType,
    content: p.content,
    status: statusNameOf(p.status),
    latest: p.latest,
    version: p.version,
    test_data: jsonOf(p.testDataJson) as JsonObject | undefined,
    inputSchema: jsonOf(p.inputSchemaJson) as JsonObject | undefined,
    project: p.projectId,
    created_at: iso(p.createdAt),
    updated_at: iso(p.updatedAt),
  });
}
