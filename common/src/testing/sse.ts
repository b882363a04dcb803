export interface SseEvent {
  id?: string;
  event: string;
  data: string;
}

/** Reads a whole Server-Sent Events response into its events (the stream must end). */
export async function readSse(response: Response): Promise<SseEvent[]> {
  const text = await response.text();
  return parseSse(text);
}

export function parseSse(text: string): SseEvent[] {
  const events: SseEvent[] = [];
  for (const block of text.split("\n\n")) {
    if (!block.trim() || block.startsWith(":")) continue;
    const event: SseEvent = { event: "message", data: "" };
    const data: string[] = [];
    for (const line of block.split("\n")) {
      if (line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
      if (field === "event") event.event = value;
      else if (field === "data") data.push(value);
      else if (field === "id") event.id = value;
    }
    event.data = data.join("\n");
    events.push(event);
  }
  return events;
}
