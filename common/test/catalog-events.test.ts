import { randomBytes } from "node:crypto";
import { afterAll, afterEach, describe, expect, it, vi } from "vitest";
import type { NatsConnection } from "@nats-io/transport-node";
import { CatalogCache, connectNats, NatsCatalogEvents, type CatalogChange } from "@pies/common/bus";
import { startPrivateNats, testNatsUrl, type PrivateNats } from "@pies/testkit";

// Catalog change events on the real NATS: on the shared server under a subject prefix of the
// test's own, and on a private server for the outage (it is restarted).

const connections: NatsConnection[] = [];
let nats: PrivateNats | undefined;

const warnings: object[] = [];
const logger = { warn: (obj: object) => void warnings.push(obj) };

async function connection(url = testNatsUrl()) {
  const nc = await connectNats(url, "catalog-events-test");
  connections.push(nc);
  return nc;
}

afterEach(() => {
  warnings.length = 0;
});

afterAll(async () => {
  for (const nc of connections) if (!nc.isClosed()) await nc.close();
  await nats?.stop();
});

describe("NatsCatalogEvents", () => {
  it("carries each change from the publisher to every listener, on <prefix>.catalog.<project>.<kind>", async () => {
    const subjectPrefix = `piestest${randomBytes(4).toString("hex")}`;
    const publisher = await NatsCatalogEvents.over(await connection(), {
      subjectPrefix,
      logger,
      listen: false,
    });
    const listeners = await Promise.all(
      [1, 2].map(async () =>
        NatsCatalogEvents.over(await connection(), { subjectPrefix, logger, listen: true }),
      ),
    );
    const received = listeners.map(() => [] as CatalogChange[]);
    listeners.forEach((l, i) => l.listen({ change: (c) => received[i]!.push(c), reset: () => {} }));
    const raw = await connection();
    const subjects: string[] = [];
    raw.subscribe(`${subjectPrefix}.catalog.>`, {
      callback: (_e, m) => void subjects.push(m.subject),
    });
    await raw.flush();

    const changes: CatalogChange[] = [
      { projectId: "p1", kind: "environment", op: "create", id: "e1" },
      { projectId: "p2", kind: "apikey", op: "delete", id: "k1" },
      { kind: "account", op: "create", id: "a1" },
    ];
    for (const c of changes) publisher.publish(c);
    await vi.waitFor(() => {
      for (const r of received) expect(r).toEqual(changes);
      expect(subjects).toHaveLength(3);
    });
    expect(subjects).toEqual([
      `${subjectPrefix}.catalog.p1.environment`,
      `${subjectPrefix}.catalog.p2.apikey`,
      `${subjectPrefix}.catalog._.account`,
    ]);
    for (const l of [publisher, ...listeners]) await l.close();
  });

  it("never throws from publish: a closed connection is logged at warn", async () => {
    const nc = await connection();
    const events = await NatsCatalogEvents.over(nc, {
      subjectPrefix: "piestestclosed",
      logger,
      listen: false,
    });
    await nc.close();
    expect(() => events.publish({ projectId: "p", kind: "prompt", op: "create" })).not.toThrow();
    expect(warnings).toHaveLength(1);
  });

  it("flushes the caches that follow it when the connection comes back after an outage", async () => {
    nats = await startPrivateNats();
    const nc = await connection(nats.url);
    const events = await NatsCatalogEvents.over(nc, {
      subjectPrefix: "pies",
      logger,
      listen: true,
    });
    const cache = new CatalogCache<string>({ maxAgeMs: 60_000, max: 100 });
    cache.follow(events);
    await cache.get("a", async () => "a@1", "p");
    await cache.get("b", async () => "b@1", "q");
    expect(cache.size).toBe(2);
    // Events published while the connection is down never reach it.
    await nats.restart(async () => {
      await new Promise((resolve) => setTimeout(resolve, 300));
    });
    await vi.waitFor(() => expect(cache.size).toBe(0), { timeout: 10_000, interval: 50 });
    // And it follows the events again after the reconnection.
    await cache.get("a", async () => "a@2", "p");
    const publisher = await NatsCatalogEvents.over(await connection(nats.url), {
      subjectPrefix: "pies",
      logger,
      listen: false,
    });
    publisher.publish({ projectId: "p", kind: "interaction", op: "create", id: "i" });
    await vi.waitFor(() => expect(cache.size).toBe(0), { timeout: 5_000, interval: 20 });
    await events.close();
  });
});
