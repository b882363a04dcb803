import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestPies, type TestPies } from "../test/in-memory-pies.js";
import { requester } from "../test/requests.js";

// What @vertesia/client 1.5 reads beyond CRUD (docs/api.md, "The published client"): a template
// rendered with data (POST /prompts/:id/render, by the executor's renderer and sandbox: no provider
// call, no run), a template's versions and the interactions that use it, and the interactions'
// tags. Each is the project's alone: another project's key gets 404 (or its own, empty, tags).

let pies: TestPies;
let call: ReturnType<typeof requester>;
let other: ReturnType<typeof requester>;
const ids: Record<string, string> = {};

beforeAll(async () => {
  pies = await startTestPies();
  call = requester(pies.app, pies.key);
  const { project } = await pies.catalog.createAccount({ name: "other" });
  other = requester(pies.app, (await pies.catalog.createApiKey({ projectId: project!.id })).secret);
  const prompt = async (label: string, body: object) => {
    const res = await call("POST", "/prompts", { name: label, role: "system", ...body });
    expect(res.status, res.text).toBe(201);
    ids[label] = res.json.id;
  };
  await prompt("jst", { content: "return `Describe ${thing} in ${words} words`" });
  await prompt("host", {
    content: 'return [typeof process, typeof require, typeof fetch, typeof Buffer].join(",")',
  });
  await prompt("hbs", { content_type: "handlebars", content: "Hello {{who}} & {{{who}}}" });
  await prompt("text", { content_type: "text", content: "As is: ${thing} {{thing}}" });
  await prompt("throws", { content: 'if (thing) throw new Error("no " + thing); return ""' });
  await prompt("huge", { content: 'return "x".repeat(1100000)' });
  await prompt("unused", { content: "return `u`" });
}, 60_000);

afterAll(async () => pies?.close());

describe("POST /prompts/:id/render", () => {
  it("renders a jst template with the body as its variables", async () => {
    const res = await call("POST", `/prompts/${ids.jst}/render`, { thing: "a pie", words: 10 });
    expect(res.status, res.text).toBe(200);
    expect(res.json).toEqual({
      id: ids.jst,
      name: "jst",
      role: "system",
      content_type: "jst",
      rendered: "Describe a pie in 10 words",
    });
  });

  it("renders jst in the executor's sandbox: no host globals", async () => {
    const res = await call("POST", `/prompts/${ids.host}/render`, {});
    expect(res.status, res.text).toBe(200);
    expect(res.json.rendered).toBe("undefined,undefined,undefined,undefined");
  });

  it("renders handlebars without HTML escaping, and text verbatim", async () => {
    const hbs = await call("POST", `/prompts/${ids.hbs}/render`, { who: "<Ann>" });
    expect(hbs.json).toMatchObject({ content_type: "handlebars", rendered: "Hello <Ann> & <Ann>" });
    const text = await call("POST", `/prompts/${ids.text}/render`, { thing: "x" });
    expect(text.json.rendered).toBe("As is: ${thing} {{thing}}");
  });

  it("takes no body as no data", async () => {
    const res = await call("POST", `/prompts/${ids.text}/render`);
    expect(res.status, res.text).toBe(200);
  });

  it("answers a template error, a missing variable and a text over the limit with 400", async () => {
    for (const [label, data] of [
      ["throws", { thing: "luck" }],
      ["jst", { thing: "a pie" }],
      ["huge", {}],
    ] as const) {
      const res = await call("POST", `/prompts/${ids[label]}/render`, data);
      expect(res.status, `${label}: ${res.text}`).toBe(400);
      expect(res.json).toMatchObject({ status: 400, code: "invalid_request" });
    }
    const thrown = await call("POST", `/prompts/${ids.throws}/render`, { thing: "luck" });
    expect(thrown.json.message).toMatch(/template error: .*no luck/);
    const huge = await call("POST", `/prompts/${ids.huge}/render`, {});
    expect(huge.json.message).toMatch(/PIES_MAX_PROMPT_BYTES/);
  });

  it("answers a body that is not an object with 400", async () => {
    for (const body of [[], '"x"', 1, "null"]) {
      const res = await call("POST", `/prompts/${ids.jst}/render`, body);
      expect(res.status, res.text).toBe(400);
      expect(res.json).toMatchObject({ code: "invalid_request" });
    }
  });

  it("is 404 for an unknown template and for another project's", async () => {
    expect((await call("POST", "/prompts/nope/render", {})).status).toBe(404);
    const res = await other("POST", `/prompts/${ids.jst}/render`, { thing: "a", words: 1 });
    expect(res.status, res.text).toBe(404);
    expect(res.json).toMatchObject({ code: "not_found" });
  });

  it("records no run", async () => {
    expect((await call("GET", "/runs")).json).toEqual([]);
  });
});

describe("GET /prompts/:id/interactions and /prompts/:id/versions", () => {
  beforeAll(async () => {
    const create = async (label: string, prompts: string[]) => {
      const res = await call("POST", "/interactions", {
        name: label,
        environment: pies.environmentId,
        prompts,
      });
      expect(res.status, res.text).toBe(201);
      ids[label] = res.json.id;
    };
    await create("Uses", [ids.jst!, ids.text!]);
    await create("Later", [ids.text!]);
    await create("Never", [ids.hbs!]);
    for (let i = 0; i < 2; i++) {
      expect((await call("POST", `/interactions/${ids.Uses}/publish`, {})).status).toBe(201);
    }
    // Its draft no longer uses jst; its two versions still do.
    const res = await call("PUT", `/interactions/${ids.Uses}`, { prompts: [ids.text] });
    expect(res.status, res.text).toBe(200);
    expect((await call("POST", `/interactions/${ids.Later}/publish`, {})).status).toBe(201);
  });

  it("lists the interactions that use a template, and which of their versions do", async () => {
    const jst = await call("GET", `/prompts/${ids.jst}/interactions`);
    expect(jst.status, jst.text).toBe(200);
    expect(jst.json).toEqual({
      prompt: ids.jst,
      interactions: [{ id: ids.Uses, name: "Uses", versions: [{ version: 2 }, { version: 1 }] }],
    });
    const text = await call("GET", `/prompts/${ids.text}/interactions`);
    expect(text.json.interactions).toEqual(
      expect.arrayContaining([
        { id: ids.Uses, name: "Uses", versions: [{ version: 2 }, { version: 1 }] },
        { id: ids.Later, name: "Later", versions: [{ version: 1 }] },
      ]),
    );
    expect(text.json.interactions).toHaveLength(2);
    const unused = await call("GET", `/prompts/${ids.unused}/interactions`);
    expect(unused.json).toEqual({ prompt: ids.unused, interactions: [] });
  });

  it("answers no versions: templates are not versioned", async () => {
    const res = await call("GET", `/prompts/${ids.jst}/versions`);
    expect(res.status, res.text).toBe(200);
    expect(res.json).toEqual([]);
  });

  it("is 404 for an unknown template and for another project's", async () => {
    for (const path of ["interactions", "versions"]) {
      expect((await call("GET", `/prompts/nope/${path}`)).status).toBe(404);
      const res = await other("GET", `/prompts/${ids.jst}/${path}`);
      expect(res.status, `${path}: ${res.text}`).toBe(404);
      expect(res.json).toMatchObject({ code: "not_found" });
    }
  });
});

describe("GET /interactions/tags", () => {
  beforeAll(async () => {
    const create = async (label: string, tags: string[]) => {
      const res = await call("POST", "/interactions", { name: label, tags });
      expect(res.status, res.text).toBe(201);
      ids[label] = res.json.id;
    };
    await create("TagA", ["red", "blue"]);
    await create("TagB", ["blue"]);
    const v = await call("POST", `/interactions/${ids.TagA}/publish`, { tags: ["gold", "blue"] });
    expect(v.status, v.text).toBe(201);
    ids.TagA1 = v.json.id;
  });

  it("lists each tag of the drafts and versions with its count and who carries it", async () => {
    const res = await call("GET", "/interactions/tags");
    expect(res.status, res.text).toBe(200);
    const byTag = Object.fromEntries(
      res.json.map((t: { tag: string; count: number; interactions: { id: string }[] }) => [
        t.tag,
        { count: t.count, ids: t.interactions.map((i) => i.id).sort() },
      ]),
    );
    expect(byTag).toEqual({
      blue: { count: 3, ids: [ids.TagA, ids.TagA1, ids.TagB].sort() },
      gold: { count: 1, ids: [ids.TagA1] },
      red: { count: 1, ids: [ids.TagA] },
    });
    expect(res.json.map((t: { tag: string }) => t.tag)).toEqual(["blue", "gold", "red"]);
    const version = res.json[1].interactions[0];
    expect(version).toMatchObject({
      id: ids.TagA1,
      name: "TagA",
      status: "published",
      version: 1,
      parent: ids.TagA,
      tags: ["gold", "blue"],
    });
  });

  it("is the project's alone", async () => {
    const res = await other("GET", "/interactions/tags");
    expect(res.status, res.text).toBe(200);
    expect(res.json).toEqual([]);
  });
});

describe("POST /interactions/:id/fork and GET /interactions/:id/forks", () => {
  const templatesOf = (i: { prompts: { template: string | { id: string } }[] }) =>
    i.prompts.map((p) => (typeof p.template === "string" ? p.template : p.template.id));

  beforeAll(async () => {
    const res = await call("POST", "/interactions", {
      name: "Source",
      environment: pies.environmentId,
      prompts: [ids.jst],
      tags: ["kept"],
      temperature: 0.3,
    });
    expect(res.status, res.text).toBe(201);
    ids.Source = res.json.id;
    const v = await call("POST", `/interactions/${ids.Source}/publish`, {});
    expect(v.status, v.text).toBe(201);
    ids.Source1 = v.json.id;
    // The live template changes after the version was published.
    const edited = await call("PUT", `/prompts/${ids.jst}`, { content: "return `Edited`" });
    expect(edited.status, edited.text).toBe(200);
  });

  it("forks a draft into a new draft with the same templates, without its tags", async () => {
    const res = await call("POST", `/interactions/${ids.Source}/fork`, {});
    expect(res.status, res.text).toBe(201);
    ids.Fork = res.json.id;
    expect(res.json).toMatchObject({
      name: "Source (fork)",
      status: "draft",
      environment: pies.environmentId,
      temperature: 0.3,
      tags: [],
    });
    expect(res.json.id).not.toBe(ids.Source);
    expect(res.json.parent).toBeUndefined();
    expect(templatesOf(res.json)).toEqual([ids.jst]);
    // A draft like any other: it executes.
    const run = await call("POST", `/interactions/${ids.Fork}/execute`, { data: {} });
    expect(run.status, run.text).toBe(200);
  });

  it("keeps the tags with keepTags", async () => {
    const res = await call("POST", `/interactions/${ids.Source}/fork`, { keepTags: true });
    expect(res.status, res.text).toBe(201);
    expect(res.json.tags).toEqual(["kept"]);
    ids.KeptFork = res.json.id;
  });

  it("forks a version with copies of its templates as published (forkPrompts)", async () => {
    const res = await call("POST", `/interactions/${ids.Source1}/fork`, { forkPrompts: true });
    expect(res.status, res.text).toBe(201);
    ids.VersionFork = res.json.id;
    const [copy] = templatesOf(res.json);
    expect(copy).not.toBe(ids.jst);
    const template = await call("GET", `/prompts/${copy}`);
    expect(template.json).toMatchObject({
      name: "jst",
      role: "system",
      content: "return `Describe ${thing} in ${words} words`",
    });
    // Without forkPrompts, a version's fork uses the templates themselves.
    const plain = await call("POST", `/interactions/${ids.Source1}/fork`, {});
    expect(templatesOf(plain.json)).toEqual([ids.jst]);
    ids.PlainVersionFork = plain.json.id;
  });

  it("lists the forks of an interaction, and of a version, apart", async () => {
    const forks = await call("GET", `/interactions/${ids.Source}/forks`);
    expect(forks.status, forks.text).toBe(200);
    expect(forks.json.map((f: { id: string }) => f.id).sort()).toEqual(
      [ids.Fork, ids.KeptFork].sort(),
    );
    expect(forks.json[0]).toMatchObject({ name: "Source (fork)", status: "draft" });
    const ofVersion = await call("GET", `/interactions/${ids.Source1}/forks`);
    expect(ofVersion.json.map((f: { id: string }) => f.id).sort()).toEqual(
      [ids.VersionFork, ids.PlainVersionFork].sort(),
    );
    expect((await call("GET", `/interactions/${ids.Fork}/forks`)).json).toEqual([]);
  });

  it("answers bad input with 400", async () => {
    for (const body of [{ keepTags: "yes" }, { forkPrompts: 1 }, { targetProject: "elsewhere" }]) {
      const res = await call("POST", `/interactions/${ids.Source}/fork`, body);
      expect(res.status, `${JSON.stringify(body)}: ${res.text}`).toBe(400);
      expect(res.json).toMatchObject({ code: "invalid_request" });
    }
  });

  it("is 404 for an unknown interaction and for another project's", async () => {
    expect((await call("POST", "/interactions/nope/fork", {})).status).toBe(404);
    expect((await call("GET", "/interactions/nope/forks")).status).toBe(404);
    const fork = await other("POST", `/interactions/${ids.Source}/fork`, {});
    expect(fork.status, fork.text).toBe(404);
    expect(fork.json).toMatchObject({ code: "not_found" });
    expect((await other("GET", `/interactions/${ids.Source}/forks`)).status).toBe(404);
  });
});
