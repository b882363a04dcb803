import { Code, ConnectError } from "@connectrpc/connect";
import { invalid, requireProject } from "@pies/common";
import type { RenderPromptRequest } from "@pies/proto/executor";
import type { ExecutorDeps } from "./context.js";
import { requestData } from "./prepare.js";
import { PromptTooLarge, TemplateError } from "./templates/render.js";

/**
 * RenderPrompt: one template of the project rendered with the request's data by the renderer an
 * execution uses (the `jst` sandbox and the project's share of it): no provider call, no run. The
 * template is read from the catalog (NOT_FOUND for another project's); a template error or a text
 * over the prompt limit is INVALID_ARGUMENT, as it is for an execution.
 */
export async function renderPrompt(deps: ExecutorDeps, req: RenderPromptRequest) {
  const projectId = requireProject(req.projectId);
  if (!req.promptId) throw invalid("prompt_id is required");
  const { prompt } = await deps.catalog.getPrompt({ projectId, id: req.promptId });
  if (!prompt) throw new ConnectError("catalog answered no prompt template", Code.Internal);
  try {
    const rendered = await deps.renderer.renderTemplate(
      prompt,
      requestData(req.dataJson),
      projectId,
    );
    return { prompt, rendered };
  } catch (err) {
    if (err instanceof TemplateError) throw invalid(`template error: ${err.message}`);
    if (err instanceof PromptTooLarge) throw invalid(err.message);
    throw err;
  }
}
