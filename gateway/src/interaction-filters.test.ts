import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestPies, type TestPies } from "../test/in-memory-pies.js";
import { requester } from "../test/requests.js";

// GET /interactions filters as SPEC.md describes them, alone and combined, over drafts and
// versions: `status` selects drafts (draft, archived) or published versions; `name` yields the
// named interaction's draft and its versions; `version` and `tags` select versions (a draft's own
// tags do not make it a match). Each case names rows that another reading would get wrong.

let pies: TestPies;
let call: ReturnType<typeof requester>;
/** Row ids by label: drafts A, B, C; versions A1, A2, B1. */
const ids: Record<string, string> = {};

beforeAll(async () => {
  pies = await startTestPies();
  call = requester(pies.app, pies.key);
  const create = async (label: string, body: object) => {
    const res = await call("POST", "/interactions", body);
    expect(res.status, res.text).toBe(201);
    ids[label] = res.json.id;
  };
  const publish = async (label: string, of: string, tags: string[]) => {
    const res = await call("POST", `/interactions/${ids[of]}/publish`, { tags });
    expect(res.status, res.text).toBe(201);
    ids[label] = res.json.id;
  };
  await create("A", { name: "Alpha", tags: ["x"] });
  await publish("A1", "A", ["stable"]);
  await publish("A2", "A", ["beta"]);
  // A draft tagged as versions are: tags must not select it.
  await create("B", { name: "Beta", tags: ["stable"] });
  await publish("B1", "B", ["stable", "beta"]);
  await create("C", { name: "Gamma", status: "archived", tags: ["x"] });
}, 60_000);

afterAll(async () => pies?.close());

const cases: [query: string, expected: string[]][] = [
  // Alone.
  ["", ["A", "B", "C"]],
  ["status=draft", ["A", "B"]],
  ["status=archived", ["C"]],
  ["status=published", ["A1", "A2", "B1"]],
  ["name=Alpha", ["A", "A1", "A2"]],
  ["name=Gamma", ["C"]],
  ["name=Nobody", []],
  ["version=1", ["A1", "B1"]],
  ["version=2", ["A2"]],
  ["version=3", []],
  ["tags=stable", ["A1", "B1"]],
  ["tags=x", []],
  ["tags=beta,x", ["A2", "B1"]],
  // Two filters.
  ["name=Alpha&status=draft", ["A"]],
  ["name=Alpha&status=published", ["A1", "A2"]],
  ["name=Alpha&status=archived", []],
  ["name=Alpha&version=2", ["A2"]],
  ["name=Beta&version=2", []],
  ["name=Alpha&tags=stable", ["A1"]],
  ["name=Beta&tags=stable", ["B1"]],
  ["status=draft&tags=stable", ["B"]],
  ["status=archived&tags=x", ["C"]],
  ["status=published&tags=beta", ["A2", "B1"]],
  ["status=published&version=2", ["A2"]],
  ["status=draft&version=1", []],
  ["version=1&tags=beta", ["B1"]],
  ["version=2&tags=stable", []],
  // Three and four.
  ["name=Alpha&version=1&tags=stable", ["A1"]],
  ["name=Alpha&version=2&tags=stable", []],
  ["name=Alpha&status=published&tags=beta,stable", ["A1", "A2"]],
  ["status=published&version=1&tags=stable", ["A1", "B1"]],
  ["name=Beta&status=published&version=1&tags=beta", ["B1"]],
  ["name=Beta&status=draft&version=1&tags=stable", []],
];

describe("GET /interactions filters", () => {
  it.each(cases)("?%s", async (query, expected) => {
    const res = await call("GET", `/interactions?${query}`);
    expect(res.status, res.text).toBe(200);
    const label = Object.fromEntries(Object.entries(ids).map(([k, v]) => [v, k]));
    expect((res.json as { id: string }[]).map((i) => label[i.id] ?? i.id).sort()).toEqual(
      [...expected].sort(),
    );
  });

  it("answers versions as references with their version fields, drafts without", async () => {
    const res = await call("GET", "/interactions?name=Alpha");
    const byId = new Map((res.json as any[]).map((i) => [i.id, i]));
    expect(byId.get(ids.A2)).toMatchObject({
      name: "Alpha",
      status: "published",
      version: 2,
      latest: true,
      parent: ids.A,
    });
    expect(byId.get(ids.A1)).toMatchObject({ version: 1, latest: false });
    expect(byId.get(ids.A)).toMatchObject({ name: "Alpha", status: "draft" });
    expect(byId.get(ids.A)).not.toHaveProperty("parent");
  });

  it("refuses a filter of the wrong type (400, naming it)", async () => {
    for (const query of ["status=live", "version=x", "version=0"]) {
      const res = await call("GET", `/interactions?${query}`);
      expect(res.status, query).toBe(400);
      expect(res.json.code).toBe("invalid_request");
      expect(res.json.message).toMatch(query.split("=")[0]!);
    }
  });
});
