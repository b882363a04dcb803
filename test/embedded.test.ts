import { spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { readSse, repoRoot } from "@pies/testkit";

// `npm start` exactly as the README says, with no DATABASE_URL or NATS_URL: PGlite and the
// in-process bus, data in PIES_DATA_DIR, the port from PORT (0: any free one).
interface Started {
  child: ChildProcess;
  url: string;
  key: string;
  output: () => string;
}

function npmStart(dataDir: string): Promise<Started> {
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? "",
    HOME: process.env.HOME ?? "",
    PORT: "0",
    PIES_DATA_DIR: dataDir,
  };
  const child = spawn("npm", ["start"], {
    cwd: repoRoot,
    env,
    detached: true,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let text = "";
  return new Promise((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`npm start did not come up:\n${text}`)),
      90_000,
    );
    const onData = (chunk: Buffer) => {
      text += chunk.toString();
      const url = /pies is running at (\S+)/.exec(text)?.[1];
      const key = /API key: (sk-[A-Za-z0-9]+)/.exec(text)?.[1];
      if (url && key) {
        clearTimeout(timer);
        resolve({ child, url, key, output: () => text });
      }
    };
    child.stdout!.on("data", onData);
    child.stderr!.on("data", onData);
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`npm start exited with ${code}:\n${text}`));
    });
  });
}

/**
 * SIGTERM to the whole process group (npm, its shell and node), as a terminal's Ctrl-C would;
 * resolves once every process of the group has exited. npm itself dies by the signal at once (so
 * its code says nothing) while node may still be closing PGlite's files: the data directory is
 * reused or removed only after that.
 */
async function stop(started: Started): Promise<void> {
  const group = -started.child.pid!;
  const exited = new Promise<void>((resolve) => started.child.once("exit", () => resolve()));
  process.kill(group, "SIGTERM");
  await exited;
  await vi.waitFor(
    () => expect(() => process.kill(group, 0), "the process group is still running").toThrow(),
    { timeout: 30_000, interval: 50 },
  );
}

let dataDir: string;
beforeAll(async () => {
  dataDir = await mkdtemp(path.join(tmpdir(), "pies-embedded-"));
});
afterAll(async () => {
  await rm(dataDir, { recursive: true, force: true });
});

describe("npm start (embedded mode)", () => {
  it("serves an execution, shuts down cleanly, and keeps its data across a restart", async () => {
    const first = await npmStart(dataDir);
    let runId: string;
    try {
      const api = (p: string, body?: unknown) =>
        fetch(`${first.url}${p}`, {
          method: body === undefined ? "GET" : "POST",
          headers: { authorization: `Bearer ${first.key}`, "content-type": "application/json" },
          body: body === undefined ? undefined : JSON.stringify(body),
        }).then(async (r) => ({ status: r.status, body: (await r.json()) as any }));

      const envs = await api("/environments");
      expect(envs.status).toBe(200);
      const testEnv = envs.body.find((e: any) => e.provider === "test");
      expect(testEnv).toBeDefined();
      const prompt = await api("/prompts", {
        name: "p",
        role: "user",
        content_type: "jst",
        content: "Hello ${who}",
      });
      expect(prompt.status).toBe(201);
      const interaction = await api("/interactions", {
        name: "Hello",
        environment: testEnv.id,
        prompts: [{ type: "template", template: prompt.body.id }],
      });
      expect(interaction.status).toBe(201);
      const run = await api(`/interactions/${interaction.body.id}/execute`, {
        data: { who: "world" },
      });
      expect(run.status).toBe(200);
      expect(run.body).toMatchObject({
        status: "completed",
        prompt: [{ role: "user", content: "Hello world" }],
      });
      expect(run.body.result).toContain("Hello world");
      runId = run.body.id;

      const streamed = await api("/runs", {
        interaction: interaction.body.id,
        stream: true,
        data: { who: "stream" },
      });
      const events = await readSse(
        await fetch(`${first.url}/runs/${streamed.body.id}/stream`, {
          headers: { authorization: `Bearer ${first.key}` },
        }),
      );
      expect(events.at(-1)?.event).toBe("close");
      expect(JSON.parse(events.at(-1)!.data).status).toBe("completed");
    } finally {
      await stop(first);
    }

    const second = await npmStart(dataDir);
    try {
      expect(second.key).toBe(first.key);
      const r = await fetch(`${second.url}/runs/${runId}`, {
        headers: { authorization: `Bearer ${second.key}` },
      });
      expect(r.status).toBe(200);
      expect(((await r.json()) as any).status).toBe("completed");
    } finally {
      await stop(second);
    }
  }, 180_000);
});
