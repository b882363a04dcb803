/** One Server-Sent Event as a client sees it. */
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

/** The events of a whole Server-Sent Events body; comment-only blocks (heartbeats) are skipped. */
export function parseSse(text: string): SseEvent[] {
  return text.split("\n\n").flatMap((block) => parseSseBlock(block) ?? []);
}

/**
 * Reads a Server-Sent Events body incrementally, calling `onEvent` as each event arrives (so that
 * the time to the first chunk is measured when it arrives, not when the body ends). Resolves when
 * the body ends. Used by the benchmark, which measures streams as they flow.
 */
export async function readSseIncrementally(
  body: AsyncIterable<Uint8Array>,
  onEvent: (event: SseEvent) => void,
): Promise<void> {
  const decoder = new TextDecoder();
  let buffer = "";
  for await (const bytes of body) {
    buffer += decoder.decode(bytes, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = parseSseBlock(buffer.slice(0, end));
      buffer = buffer.slice(end + 2);
      if (event) onEvent(event);
    }
  }
  buffer += decoder.decode();
  const last = parseSseBlock(buffer);
  if (last) onEvent(last);
}

/**
 * One block (the lines between blank lines) as an event, or undefined when it holds no field: a
 * heartbeat comment or blank space. Lines may end in CRLF; comment lines are skipped wherever
 * they stand; unknown fields (retry) count as fields but are not kept.
 */
function parseSseBlock(block: string): SseEvent | undefined {
  const event: SseEvent = { event: "message", data: "" };
  const data: string[] = [];
  let fields = 0;
  for (const rawLine of block.split("\n")) {
    const line = rawLine.endsWith("\r") ? rawLine.slice(0, -1) : rawLine;
    if (line === "" || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    fields++;
    if (field === "event") event.event = value;
    else if (field === "data") data.push(value);
    else if (field === "id") event.id = value;
  }
  if (fields === 0) return undefined;
  event.data = data.join("\n");
  return event;
}
