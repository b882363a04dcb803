import { spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { connect as connectTcp } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { JetStreamRunEventBus } from "@pies/common";
import { freePort, parseSse } from "@pies/common/testing";
import { startTestPies, type TestPies } from "./in-memory-pies.js";

// The gateway and the services in memory, on a PRIVATE nats-server (never the shared one), which
// the tests kill and start again while streams are open.

/** A nats-server with JetStream on a free port and a store of its own; killed and started again. */
class PrivateNats {
  private child: ChildProcess | undefined;
  private constructor(
    readonly port: number,
    private readonly dir: string,
  ) {}

  static async start(): Promise<PrivateNats> {
    const nats = new PrivateNats(
      await freePort(),
      await mkdtemp(path.join(tmpdir(), "pies-nats-")),
    );
    await nats.up();
    return nats;
  }

  get url() {
    return `nats://127.0.0.1:${this.port}`;
  }

  async up() {
    this.child = spawn(
      "nats-server",
      ["-js", "-a", "127.0.0.1", "-p", String(this.port), "-sd", this.dir],
      { stdio: "ignore" },
    );
    const deadline = Date.now() + 10_000;
    while (!(await accepts(this.port))) {
      if (Date.now() > deadline) throw new Error("the private nats-server did not start");
      await sleep(50);
    }
  }

  /** SIGKILL: as abrupt as a crash. */
  async down() {
    const child = this.child!;
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((resolve) => child.once("exit", resolve));
      child.kill("SIGKILL");
      await exited;
    }
  }

  async remove() {
    await this.down();
    await rm(this.dir, { recursive: true, force: true });
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connectTcp(port, "127.0.0.1");
    socket.once("connect", () => (socket.destroy(), resolve(true)));
    socket.once("error", () => resolve(false));
  });
}

let nats: PrivateNats;
let bus: JetStreamRunEventBus;
let pies: TestPies;

beforeAll(async () => {
  nats = await PrivateNats.start();
  bus = await JetStreamRunEventBus.connect({
    url: nats.url,
    stream: "PIES_RUNS",
    subjectPrefix: "pies",
    maxAgeSeconds: 600,
    name: "pies-test",
  });
  pies = await startTestPies({ bus, gateway: { sseHeartbeatSeconds: 1 } });
});

afterAll(async () => {
  await pies?.close();
  await bus?.close();
  await nats?.remove();
});

async function call(method: "GET" | "POST", url: string, payload?: object) {
  const response = await pies.app.inject({
    method,
    url: `/api/v1${url}`,
    headers: { authorization: `Bearer ${pies.key}` },
    ...(payload ? { payload } : {}),
  });
  return response.json();
}

async function streamedRun(model: string) {
  const prompt = await call("POST", "/prompts", { content: "Hello", content_type: "text" });
  const interaction = await call("POST", "/interactions", {
    name: model,
    model,
    environment: pies.environmentId,
    prompts: [{ template: prompt.id }],
  });
  return (await call("POST", "/runs", { interaction: interaction.id, stream: true })).id as string;
}

/** Opens the run's stream and resolves with its events once it has ended; waits until it runs. */
async function openStream(runId: string) {
  const reading = pies.app
    .inject({
      url: `/api/v1/runs/${runId}/stream`,
      headers: { authorization: `Bearer ${pies.key}` },
    })
    .then((r) => parseSse(r.body));
  while ((await call("GET", `/runs/${runId}`)).status !== "processing") await sleep(50);
  return reading;
}

describe("a stream across a NATS restart", () => {
  it("ends with close and every chunk when NATS restarts while the run executes", async () => {
    const runId = await streamedRun("test-latency-4000");
    const reading = openStream(runId);
    await sleep(500);
    await nats.down();
    await sleep(1500);
    await nats.up();
    const events = await reading;
    expect(events.map((e) => e.event).filter((e) => e !== "message")).toEqual(["close"]);
    const final = JSON.parse(events.at(-1)!.data);
    expect(final).toMatchObject({ id: runId, status: "completed" });
    const text = events
      .filter((e) => e.event === "message")
      .map((e) => JSON.parse(e.data))
      .join("");
    expect(text).toBe(final.result);
  }, 30_000);

  it("ends with close (the stored run) when the run ends while NATS is down", async () => {
    const runId = await streamedRun("test-latency-1000");
    const reading = openStream(runId);
    await nats.down();
    try {
      const events = await reading;
      expect(events.map((e) => e.event).filter((e) => e !== "message")).toEqual(["close"]);
      const final = JSON.parse(events.at(-1)!.data);
      expect(final).toMatchObject({ id: runId });
      expect(["completed", "failed"]).toContain(final.status);
      expect((await call("GET", `/runs/${runId}`)).status).toBe(final.status);
    } finally {
      await nats.up();
    }
  }, 30_000);
});
