import type { Interaction } from "./model";

/** What a diff compares of an interaction or a version, each part as text. */
export interface Snapshot {
  prompts: string;
  schema: string;
  settings: string;
}

const json = (value: unknown) => (value === undefined ? "" : JSON.stringify(value, null, 2));

/**
 * An interaction as three texts: its prompts in order (role, content type, template, input
 * schema), its result schema, and its model settings and other fields; not its tags (a version's
 * are its publish's, listed with the versions, so a version would always differ from its draft).
 */
export function snapshotOf(interaction: Interaction): Snapshot {
  const prompts = interaction.prompts
    .map((segment, index) => {
      if (segment.type === "chat")
        return `## Prompt ${index + 1}: chat messages from ${segment.chat_path ?? ""}`;
      const t = typeof segment.template === "object" ? segment.template : undefined;
      if (!t) return `## Prompt ${index + 1}: template ${String(segment.template)}`;
      const schema = t.inputSchema ? `\n-- input schema --\n${json(t.inputSchema)}` : "";
      return `## Prompt ${index + 1}: ${t.role} · ${t.content_type} · ${t.name}\n${t.content}${schema}`;
    })
    .join("\n\n");
  const settings = {
    name: interaction.name,
    description: interaction.description || undefined,
    environment: interaction.environment,
    model: interaction.model,
    temperature: interaction.temperature,
    max_tokens: interaction.max_tokens,
    cache_policy: interaction.cache_policy,
    store: interaction.store,
    test_data: interaction.test_data,
  };
  return { prompts, schema: json(interaction.resultSchema), settings: json(settings) };
}
