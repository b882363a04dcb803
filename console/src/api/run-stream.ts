import { signedFetch } from "./client";

/** One Server-Sent Event. */
export interface StreamEvent {
  event: string;
  data: string;
  id?: string;
}

/**
 * Reads `GET /api/v1/runs/:id/stream` with fetch and a reader (EventSource cannot send the
 * Authorization header), calling `onEvent` for each event as it arrives.
 */
export function readRunStream(
  runId: string,
  onEvent: (event: StreamEvent) => void,
  signal?: AbortSignal,
): Promise<void> {
  return readEventStream(`/api/v1/runs/${encodeURIComponent(runId)}/stream`, onEvent, signal);
}

/** A stream the API refused (its status: 429 when the key has too many streams open). */
export class StreamRefused extends Error {
  constructor(
    message: string,
    readonly status: number,
  ) {
    super(message);
  }
}

/**
 * Reads any of the API's Server-Sent Event streams (`/runs/:id/stream`, `/experiments/:id/stream`)
 * the same way: fetch with the session's token in the Authorization header (not `?access_token=`
 * in the URL, where it would land in logs), then a reader, until the server ends the stream or
 * `signal` aborts.
 */
export async function readEventStream(
  path: string,
  onEvent: (event: StreamEvent) => void,
  signal?: AbortSignal,
): Promise<void> {
  const response = await signedFetch(path, {
    headers: { accept: "text/event-stream" },
    signal,
  });
  if (!response.ok || !response.body) {
    const body = (await response.json().catch(() => undefined)) as { message?: string } | undefined;
    throw new StreamRefused(
      body?.message ?? `The stream was refused (HTTP ${response.status}).`,
      response.status,
    );
  }
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value.replace(/\r\n?/g, "\n");
    let end: number;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const event = parseBlock(block);
      if (event) onEvent(event);
    }
  }
}

/** An event's lines (`event:`, `data:`, `id:`; `:` comments are keep-alives). */
function parseBlock(block: string): StreamEvent | undefined {
  let event = "message";
  let id: string | undefined;
  const data: string[] = [];
  for (const line of block.split("\n")) {
    if (!line || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "event") event = value;
    else if (field === "data") data.push(value);
    else if (field === "id") id = value;
  }
  return data.length > 0 ? { event, data: data.join("\n"), id } : undefined;
}
