import { ConnectError } from "@connectrpc/connect";
import Handlebars from "handlebars";
import type { JsonObject } from "@pies/common";
import type { Interaction } from "@pies/proto/catalog";
import { JstSandbox, TemplateError } from "./jst.js";

export { TemplateError };

export interface ChatMessage {
  role: "system" | "user" | "assistant";
  content: string;
}

const ROLES = new Set(["system", "user", "assistant"]);

/**
 * Turns an interaction's prompt segments into chat messages: `jst` in the sandbox, `handlebars`
 * (no HTML escaping: prompts are not HTML), `text` verbatim, and `chat` segments expanded from an
 * array of {role, content} in the input data.
 */
export class PromptRenderer {
  private readonly handlebars = Handlebars.create();
  private readonly compiled = new Map<string, HandlebarsTemplateDelegate>();

  constructor(private readonly jst: JstSandbox) {}

  /** The messages of `interaction` with `data`; `jst` renders count against `projectId`'s share. */
  async render(interaction: Interaction, data: JsonObject, projectId = ""): Promise<ChatMessage[]> {
    const messages: ChatMessage[] = [];
    for (const segment of interaction.prompts) {
      if (segment.type === "chat") {
        messages.push(...chatMessages(data, segment.chatPath));
        continue;
      }
      const template = segment.template;
      if (!template) throw new TemplateError(`prompt template ${segment.templateId} is missing`);
      const role = (ROLES.has(template.role) ? template.role : "user") as ChatMessage["role"];
      try {
        messages.push({
          role,
          content: await this.renderOne(template.contentType, template.content, data, projectId),
        });
      } catch (err) {
        // A project over its share of the sandbox is not a template error (RESOURCE_EXHAUSTED).
        if (err instanceof ConnectError) throw err;
        const reason = err instanceof Error ? err.message : String(err);
        throw new TemplateError(`prompt template ${template.name || template.id}: ${reason}`);
      }
    }
    return messages;
  }

  private async renderOne(
    contentType: string,
    content: string,
    data: JsonObject,
    projectId: string,
  ): Promise<string> {
    switch (contentType) {
      case "text":
        return content;
      case "handlebars":
        return this.handlebarsTemplate(content)(data);
      case "jst":
      case "":
        return this.jst.render(content, data, projectId);
      default:
        throw new TemplateError(`content type ${contentType} is not supported`);
    }
  }

  private handlebarsTemplate(content: string): HandlebarsTemplateDelegate {
    let template = this.compiled.get(content);
    if (!template) {
      template = this.handlebars.compile(content, { noEscape: true });
      if (this.compiled.size >= 500) this.compiled.delete(this.compiled.keys().next().value!);
      this.compiled.set(content, template);
    }
    return template;
  }
}

function chatMessages(data: JsonObject, path: string): ChatMessage[] {
  const value = path
    .split(".")
    .reduce<unknown>(
      (v, key) => (v && typeof v === "object" ? (v as Record<string, unknown>)[key] : undefined),
      data,
    );
  if (!Array.isArray(value)) throw new TemplateError(`input ${path} must be an array of messages`);
  return value.map((m, i) => {
    const { role, content } = (m ?? {}) as { role?: unknown; content?: unknown };
    if (typeof role !== "string" || !ROLES.has(role) || typeof content !== "string") {
      throw new TemplateError(`input ${path}[${i}] must be {role, content}`);
    }
    return { role: role as ChatMessage["role"], content };
  });
}
