import { createServer, request, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, expect, it } from "vitest";
import { createLogger } from "@pies/common";
import { EventStream } from "./event-stream.js";

// An event stream taken over after its client left (a run started while the client went): its
// signal still aborts, so that what the stream holds (the key's slot, a live subscription) goes
// back now rather than when the run ends.
describe("an event stream", () => {
  it("over a response whose client already left aborts its signal, after its listeners are on", async () => {
    let gone!: (res: ServerResponse) => void;
    const closed = new Promise<ServerResponse>((resolve) => (gone = resolve));
    const server = createServer((_req, res) => res.once("close", () => gone(res)));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      const { port } = server.address() as AddressInfo;
      const client = request({ host: "127.0.0.1", port, path: "/" });
      client.on("error", () => {});
      client.end();
      // The client leaves while the server has not answered yet.
      setTimeout(() => client.destroy(), 50);
      const res = await closed;
      const stream = new EventStream(res, createLogger("test", "silent"));
      let released = 0;
      stream.signal.addEventListener("abort", () => released++, { once: true });
      await expect.poll(() => released, { timeout: 2000 }).toBe(1);
      expect(stream.open).toBe(false);
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });
});
