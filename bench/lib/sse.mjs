/**
 * Reads a Server-Sent Events body incrementally, calling onEvent({event, data, id}) as each event
 * arrives (so time to first chunk is measured when it arrives, not when the body ends). Comment
 * lines (heartbeats) are skipped. Resolves when the body ends.
 */
export async function readSseIncrementally(body, onEvent) {
  const decoder = new TextDecoder();
  let buffer = "";
  for await (const bytes of body) {
    buffer += decoder.decode(bytes, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const event = parseBlock(block);
      if (event) onEvent(event);
    }
  }
  buffer += decoder.decode();
  if (buffer.trim()) {
    const event = parseBlock(buffer);
    if (event) onEvent(event);
  }
}

function parseBlock(block) {
  const event = { event: "message", data: "", id: undefined };
  const data = [];
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
