import type { RouteOptions } from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestPies, type TestPies } from "../test/in-memory-pies.js";
import { request } from "../test/requests.js";

// Every route that takes a body checks its type by the route's declared schema: a body that is
// JSON but not the object the route expects is a 400 with pies' error shape, before the handler
// (path parameters that name nothing would otherwise answer 404, and bodies read as absent 200).
// The routes are read from the router as they are registered, so a route added later is driven too.

let pies: TestPies;
let doc: any;
const routes: { method: string; url: string }[] = [];

beforeAll(async () => {
  pies = await startTestPies();
  pies.app.addHook("onRoute", (route: RouteOptions) => {
    for (const method of [route.method].flat()) {
      if (method === "POST" || method === "PUT" || method === "PATCH")
        routes.push({ method, url: route.url });
    }
  });
  await pies.app.ready();
  doc = (await pies.app.inject({ url: "/api/v1/openapi.json" })).json();
}, 60_000);

afterAll(async () => pies?.close());

const NOT_OBJECTS = ["null", "[]", '"x"', "1", "true"];

describe("a body that is not an object", () => {
  it("is found on every route that takes a body (and each declares its body)", () => {
    // The execute, search and catalog writes, the token exchange at the root and under /api/v1.
    expect(routes.length).toBeGreaterThan(15);
    for (const { method, url } of routes) {
      const path = url.replace(/:(\w+)/g, "{$1}");
      const op = doc.paths[path]?.[method.toLowerCase()];
      expect(
        op?.requestBody?.content?.["application/json"]?.schema,
        `${method} ${url}`,
      ).toMatchObject({ type: "object" });
    }
  });

  it("is a 400 invalid_request naming the body, on every route, for null, [], a string, a number and a boolean", async () => {
    const failures: string[] = [];
    for (const { method, url } of routes) {
      for (const body of NOT_OBJECTS) {
        const res = await pies.app
          .inject({
            method: method as "POST",
            url: url.replace(/:(\w+)/g, "nope"),
            headers: { authorization: `Bearer ${pies.key}`, "content-type": "application/json" },
            payload: body,
          })
          .then((r) => ({ status: r.statusCode, json: r.json() }));
        const ok =
          res.status === 400 &&
          res.json?.error === "Bad Request" &&
          res.json?.status === 400 &&
          res.json?.code === "invalid_request" &&
          typeof res.json?.message === "string" &&
          /^body: Expected object/.test(res.json.message);
        if (!ok)
          failures.push(`${method} ${url} ${body}: ${res.status} ${JSON.stringify(res.json)}`);
      }
    }
    expect(failures).toEqual([]);
  });

  it("is not confused with no body: a route whose fields are all optional still takes none", async () => {
    const res = await request(pies.app, "POST", "/runs/search", { key: pies.key });
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ results: [] });
    const token = await pies.app.inject({
      method: "POST",
      url: "/token/issue",
      headers: { authorization: `Bearer ${pies.key}` },
    });
    expect(token.statusCode).toBe(200);
  });
});
