import { ConnectError } from "@connectrpc/connect";
import Handlebars from "handlebars";
import { LRUCache } from "lru-cache";
import type { JsonObject } from "@pies/common";
import type { Interaction, PromptTemplate } from "@pies/proto/catalog";
import { JstSandbox, TemplateError } from "./jst.js";

export { TemplateError };

/** The rendered prompt is larger than PIES_MAX_PROMPT_BYTES. */
export class PromptTooLarge extends Error {}

export interface RenderLimits {
  /** Largest rendered prompt, in bytes of UTF-8 over all its messages (PIES_MAX_PROMPT_BYTES). */
  maxPromptBytes: number;
}

export interface ChatMessage {
  role: "system" | "user" | "assistant";
  content: string;
}

/** What rendering needs of a template (a PromptTemplate's fields). */
export type Template = Pick<PromptTemplate, "id" | "name" | "contentType" | "content">;

const ROLES = new Set(["system", "user", "assistant"]);

/**
 * Turns an interaction's prompt segments into chat messages: `jst` in the sandbox, `handlebars`
 * (no HTML escaping: prompts are not HTML), `text` verbatim, and `chat` segments expanded from an
 * array of {role, content} in the input data. A prompt larger than the limit, or a segment whose
 * output holds a NUL character, is refused (PostgreSQL cannot store a NUL in the run's prompt,
 * and cutting the text there would send the provider less than the template said).
 */
export class PromptRenderer {
  private readonly handlebars = Handlebars.create();
  /** Compiled Handlebars templates by their text; the least recently used go past 500. */
  private readonly compiled = new LRUCache<string, HandlebarsTemplateDelegate>({ max: 500 });

  constructor(
    private readonly jst: JstSandbox,
    private readonly limits: RenderLimits,
  ) {}

  /** The messages of `interaction` with `data`; `jst` renders count against `projectId`'s share. */
  async render(interaction: Interaction, data: JsonObject, projectId = ""): Promise<ChatMessage[]> {
    const messages: ChatMessage[] = [];
    let bytes = 0;
    const count = (added: ChatMessage[], source: string) => {
      for (const m of added) bytes += Buffer.byteLength(m.content, "utf8");
      if (bytes > this.limits.maxPromptBytes) {
        throw new PromptTooLarge(
          `the rendered prompt is larger than ${this.limits.maxPromptBytes} bytes ` +
            `(PIES_MAX_PROMPT_BYTES), reached at ${source}`,
        );
      }
      messages.push(...added);
    };
    for (const segment of interaction.prompts) {
      if (segment.type === "chat") {
        count(chatMessages(data, segment.chatPath), `chat segment ${segment.chatPath}`);
        continue;
      }
      const template = segment.template;
      if (!template) throw new TemplateError(`prompt template ${segment.templateId} is missing`);
      const role = (ROLES.has(template.role) ? template.role : "user") as ChatMessage["role"];
      const { name, content } = await this.template(template, data, projectId);
      count([{ role, content }], name);
    }
    return messages;
  }

  /**
   * One template with `data` (POST /prompts/:id/render): what a segment of it renders to, within
   * the same limits (the prompt size counts this text alone).
   */
  async renderTemplate(template: Template, data: JsonObject, projectId = ""): Promise<string> {
    const { name, content } = await this.template(template, data, projectId);
    if (Buffer.byteLength(content, "utf8") > this.limits.maxPromptBytes) {
      throw new PromptTooLarge(
        `the rendered prompt is larger than ${this.limits.maxPromptBytes} bytes ` +
          `(PIES_MAX_PROMPT_BYTES), reached at ${name}`,
      );
    }
    return content;
  }

  private async template(template: Template, data: JsonObject, projectId: string) {
    const name = `prompt template ${template.name || template.id}`;
    let content: string;
    try {
      content = await this.renderOne(template.contentType, template.content, data, projectId);
    } catch (err) {
      // A project over its share of the sandbox is not a template error (RESOURCE_EXHAUSTED).
      if (err instanceof ConnectError) throw err;
      const reason = err instanceof Error ? err.message : String(err);
      throw new TemplateError(`${name}: ${reason}`);
    }
    if (content.includes("\0")) {
      throw new TemplateError(
        `${name}: its output contains a NUL character (\\u0000), which a prompt cannot hold`,
      );
    }
    return { name, content };
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
