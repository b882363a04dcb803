import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { VertesiaClient } from "@vertesia/client";
import { startTestStack, type Stack } from "@pies/testkit";

// The published client of this API (@vertesia/client, npm) driving the four processes as a user's
// application would: it exchanges its sk- key for a JWT at POST /token/issue, then calls the REST
// API with it, and streams with ?access_token=.
let stack: Stack;
let client: VertesiaClient;

beforeAll(async () => {
  stack = await startTestStack("vertesia");
  client = new VertesiaClient({
    serverUrl: stack.gatewayUrl,
    storeUrl: stack.gatewayUrl,
    tokenServerUrl: stack.gatewayUrl,
    apikey: stack.bootstrap.key,
  });
});

afterAll(async () => {
  if (stack) expect(await stack.stop()).toEqual({ gateway: 0, executor: 0, runs: 0, catalog: 0 });
});

describe("@vertesia/client against pies", () => {
  it("exchanges its key for a token", async () => {
    const { token } = await client.getAuthToken(stack.bootstrap.key);
    expect(token.split(".")).toHaveLength(3);
  });

  it("creates and retrieves environments, and lists them", async () => {
    const created = await client.environments.create({
      name: "client-env",
      provider: "test",
      default_model: "test",
    } as any);
    expect(created.id).toBeTruthy();
    const read = await client.environments.retrieve(created.id);
    expect(read).toMatchObject({ id: created.id, name: "client-env", provider: "test" });
    const listed = await client.environments.list();
    expect(listed.map((e) => e.id)).toEqual(expect.arrayContaining([created.id]));
  });

  it("creates, retrieves and executes an interaction, blocking and streamed, and reads its runs", async () => {
    const prompt = await client.prompts.create({
      name: "client-prompt",
      role: "user",
      content_type: "jst",
      content: "return `Describe ${thing}`",
      inputSchema: {
        type: "object",
        properties: { thing: { type: "string" } },
        required: ["thing"],
      },
    } as any);
    const interaction = await client.interactions.create({
      name: "ClientDescribe",
      environment: stack.bootstrap.environment,
      prompts: [{ type: "template", template: prompt.id }],
      result_schema: {
        type: "object",
        properties: { description: { type: "string" } },
        required: ["description"],
      },
    } as any);
    const retrieved = await client.interactions.retrieve(interaction.id);
    expect(retrieved.name).toBe("ClientDescribe");
    expect((retrieved.prompts[0]!.template as any).id).toBe(prompt.id);

    const blocking = await client.interactions.execute(interaction.id, {
      data: { thing: "a pie" },
      tags: ["client"],
    });
    expect(blocking.status).toBe("completed");
    expect(typeof (blocking.result as any)).not.toBe("undefined");

    const chunks: string[] = [];
    const streamed = await client.interactions.execute(
      interaction.id,
      { data: { thing: "a stream" } },
      (chunk) => chunks.push(chunk),
    );
    expect(chunks.length).toBeGreaterThan(0);
    const final = await client.runs.retrieve(streamed.id);
    expect(final.status).toBe("completed");
    // The chunks make up the stored result (the client turns a run's result into parts).
    const raw = await fetch(`${stack.gatewayUrl}/api/v1/runs/${streamed.id}`, {
      headers: { authorization: `Bearer ${stack.bootstrap.key}` },
    }).then((r) => r.json() as Promise<{ result: unknown }>);
    expect(JSON.parse(chunks.join(""))).toEqual(raw.result);

    const run = await client.runs.retrieve(blocking.id);
    expect(run).toMatchObject({ id: blocking.id, status: "completed", tags: ["client"] });
    // Publish a version, list versions, and execute it by name.
    const version = await client.interactions.publish(interaction.id, {
      visibility: "private",
      tags: ["v1"],
    } as any);
    expect((version as any).version).toBe(1);
    const versions = await client.interactions.listVersions(interaction.id);
    expect(versions.map((v) => v.id)).toEqual([version.id]);
    const byName = await client.interactions.executeByName("ClientDescribe@1", {
      data: { thing: "a version" },
    });
    expect(byName.status).toBe("completed");
    expect((byName as any).interaction.id ?? byName.interaction).toBe(version.id);

    // Search: a Lucene term over the input data, a filter and a facet.
    const found = (await client.runs.search({
      query: 'thing:"a pie"',
      limit: 10,
      filters: { interaction: interaction.id },
      facets: { status: { type: "string", path: "status" } },
    } as any)) as any;
    expect(found.results.map((r: { id: string }) => r.id)).toEqual([blocking.id]);
    expect(found.meta.count.total).toBe(1);

    const listed = await client.runs.list({
      limit: 10,
      filters: { interaction: interaction.id } as any,
    });
    expect(listed.map((r) => r.id)).toEqual(expect.arrayContaining([blocking.id, streamed.id]));
  });
});
