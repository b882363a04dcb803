import Fastify from "fastify";
import { describe, expect, it } from "vitest";
import { closeGracefully, trackInFlight } from "./drain.js";

async function server(handlerMs: number) {
  const app = Fastify();
  trackInFlight(app);
  app.post("/work", async () => {
    await new Promise((resolve) => setTimeout(resolve, handlerMs));
    return { done: true };
  });
  const url = await app.listen({ host: "127.0.0.1", port: 0 });
  return { app, url };
}

describe("closeGracefully", () => {
  it("does not wait out the grace period for a client that aborted mid-request", async () => {
    const { app, url } = await server(200);
    const controller = new AbortController();
    const request = fetch(`${url}/work`, { method: "POST", signal: controller.signal }).catch(
      (e: Error) => e.name,
    );
    setTimeout(() => controller.abort(), 50);
    expect(await request).toBe("AbortError");
    await new Promise((resolve) => setTimeout(resolve, 300));
    const started = Date.now();
    await closeGracefully(app, 10_000);
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  it("lets a request in flight finish before closing", async () => {
    const { app, url } = await server(300);
    const response = fetch(`${url}/work`, { method: "POST" }).then((r) => r.json());
    await new Promise((resolve) => setTimeout(resolve, 50));
    await closeGracefully(app, 10_000);
    expect(await response).toEqual({ done: true });
  });
});
