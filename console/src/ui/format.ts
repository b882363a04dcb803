/** A date as people read it here, or a dash. */
export function formatDate(value?: string): string {
  if (!value) return "—";
  const date = new Date(value);
  return Number.isNaN(date.getTime()) ? value : date.toLocaleString();
}

/** JSON as the editors show it (two spaces), or "" for nothing. */
export function pretty(value: unknown): string {
  return value === undefined || value === null ? "" : JSON.stringify(value, null, 2);
}

/** Parses an editor's JSON: undefined for an empty editor, else the value or the parse error. */
export function parseJson(text: string): { value?: unknown; error?: string } {
  if (!text.trim()) return {};
  try {
    return { value: JSON.parse(text) };
  } catch (err) {
    return { error: `Not valid JSON: ${(err as Error).message}` };
  }
}

/** Tags typed as "a, b c": split on commas and spaces, without empties or repeats. */
export function splitTags(text: string): string[] {
  return [...new Set(text.split(/[\s,]+/).filter(Boolean))];
}
