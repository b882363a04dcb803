import { afterEach, describe, expect, it } from "vitest";
import Fastify, { type FastifyInstance } from "fastify";
import { create, toBinary } from "@bufbuild/protobuf";
import { createLogger } from "@pies/common";
import { MemoryRunEventBus } from "@pies/common/bus";
import type { Principal } from "@pies/proto/catalog";
import { RunSchema, RunStatus, type Run } from "@pies/proto/runs";
import { parseSse } from "@pies/testkit";
import type { GatewayDeps } from "../deps.js";
import { GatewayMetrics } from "../metrics.js";
import { RunStreams } from "./run-streams.js";
import { StreamSlots } from "./stream-slots.js";

const principal = { apiKeyId: "k1", projectId: "p1" } as Principal;
const run = (id: string, status: RunStatus) =>
  create(RunSchema, { id, projectId: "p1", status, stream: true });

let app: FastifyInstance | undefined;
afterEach(async () => {
  await app?.close();
  app = undefined;
});

describe("RunStreams, one request", () => {
  it("starts the run as a second request would when the executor answers it created (an older release)", async () => {
    // An executor before ExecuteRequest.start ignores it and the id it was given: it makes the
    // run created under its own id. The stream starts that run and relays its events.
    const bus = new MemoryRunEventBus();
    const started: string[] = [];
    const executor = {
      async startRun({ runId }: { runId: string }) {
        started.push(runId);
        setTimeout(() => {
          void (async () => {
            await bus.publish(runId, "chunk", new TextEncoder().encode("hello"), 1);
            const end = toBinary(RunSchema, run(runId, RunStatus.COMPLETED));
            await bus.publish(runId, "end", end, 2);
          })();
        }, 50);
        return { started: true, run: run(runId, RunStatus.PROCESSING) };
      },
    };
    const deps = {
      executor,
      bus,
      logger: createLogger("run-streams-test", "silent"),
      options: { sseHeartbeatSeconds: 60 },
    } as unknown as GatewayDeps;
    const streams = new RunStreams(deps, new GatewayMetrics(), new StreamSlots(1));
    app = Fastify();
    app.get("/", (_request, reply) =>
      streams.open(
        principal,
        {
          runId: "0000000000000000000000aa",
          start: async (): Promise<Run> => run("0000000000000000000000bb", RunStatus.CREATED),
        },
        reply,
      ),
    );
    const response = await app.inject({ url: "/" });
    expect(started).toEqual(["0000000000000000000000bb"]);
    expect(response.headers["pies-run-id"]).toBe("0000000000000000000000bb");
    const events = parseSse(response.body);
    expect(events.map((e) => e.event)).toEqual(["run", "message", "close"]);
    expect(JSON.parse(events[0]!.data)).toMatchObject({
      id: "0000000000000000000000bb",
      status: "processing",
    });
    expect(JSON.parse(events[1]!.data)).toBe("hello");
    expect(JSON.parse(events[2]!.data)).toMatchObject({ status: "completed" });
  });
});
