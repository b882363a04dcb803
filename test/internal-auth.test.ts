import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, ConnectError } from "@connectrpc/connect";
import { peerTransport, serviceClient } from "@pies/common/server";
import { CatalogService } from "@pies/proto/catalog";
import { ExecutorService } from "@pies/proto/executor";
import { Health, HealthCheckResponse_ServingStatus as Serving } from "@pies/proto/health";
import { RunsService } from "@pies/proto/runs";
import {
  expectJson,
  gatewayApi,
  internalToken,
  startFakeOpenAI,
  startTestStack,
  type ApiClient,
  type FakeOpenAI,
  type Stack,
} from "@pies/testkit";

// The four processes refuse each other's calls without the shared internal credential
// (PIES_INTERNAL_TOKEN), answer health checks without it, and never show a provider key: not in a
// response, an error or a log line (every process logs at debug here).
let stack: Stack;
let upstream: FakeOpenAI;
let api: ApiClient;
const providerKey = `sk-leak-canary-${randomBytes(12).toString("hex")}`;

beforeAll(async () => {
  upstream = await startFakeOpenAI({ apiKey: providerKey });
  stack = await startTestStack("internal_auth", {
    env: { PIES_ALLOWED_ENDPOINTS: "127.0.0.1", LOG_LEVEL: "debug" },
  });
  api = gatewayApi(stack.gatewayUrl, stack.bootstrap.key);
});

afterAll(async () => {
  try {
    if (stack) expect(await stack.stop()).toEqual({ gateway: 0, executor: 0, runs: 0, catalog: 0 });
  } finally {
    await upstream?.close();
  }
});

/** One call per service that would do something for a trusted caller. */
const calls = {
  catalog: (token?: string) =>
    serviceClient(
      CatalogService,
      peerTransport(stack.catalogUrl, "catalog", token),
    ).resolveExecution({
      projectId: stack.bootstrap.project,
      interaction: { case: "interactionName", value: "X" },
    }),
  runs: (token?: string) =>
    serviceClient(RunsService, peerTransport(stack.runsUrl, "runs", token)).listRuns({
      projectId: stack.bootstrap.project,
    }),
  executor: (token?: string) =>
    serviceClient(ExecutorService, peerTransport(stack.executorUrl, "executor", token)).execute({
      interaction: { case: "interactionName", value: "X" },
    }),
};

const codeOf = (promise: Promise<unknown>) =>
  promise.then(
    () => "ok" as const,
    (err: unknown) => ConnectError.from(err).code,
  );

describe("internal calls", () => {
  it.each(["catalog", "runs", "executor"] as const)(
    "%s: UNAUTHENTICATED without the credential or with a wrong one, served with it",
    async (name) => {
      expect(await codeOf(calls[name]())).toBe(Code.Unauthenticated);
      expect(await codeOf(calls[name](randomBytes(32).toString("base64url")))).toBe(
        Code.Unauthenticated,
      );
      expect(await codeOf(calls[name](internalToken.slice(0, -1)))).toBe(Code.Unauthenticated);
      // With it, the call reaches the service (which may still find the request wanting).
      expect(await codeOf(calls[name](internalToken))).not.toBe(Code.Unauthenticated);
    },
  );

  it.each(["catalogUrl", "runsUrl", "executorUrl"] as const)(
    "%s answers health checks without a credential (Kubernetes probes send none)",
    async (url) => {
      const health = serviceClient(Health, peerTransport(stack[url]));
      expect((await health.check({ service: "" })).status).toBe(Serving.SERVING);
      expect((await health.check({ service: "readiness" })).status).toBe(Serving.SERVING);
    },
  );
});

describe("provider keys", () => {
  const json = <T = any>(response: Response, status = 200) =>
    expectJson<T>(response, status, () => stack.output());

  it("appear in no response, error, metric or log line, whatever the execution did", async () => {
    const bodies: string[] = [];
    const keep = async (response: Response) => {
      const text = await response.clone().text();
      bodies.push(text);
      return response;
    };
    const environment = await json(
      await keep(
        await api("/environments", {
          body: {
            name: "leaky",
            provider: "openai_compatible",
            endpoint_url: upstream.url,
            apiKey: providerKey,
            default_model: "fake-model",
          },
        }),
      ),
      201,
    );
    // A second environment whose key the provider refuses: its error must not quote the key.
    const refused = await json(
      await keep(
        await api("/environments", {
          body: {
            name: "refused",
            provider: "openai_compatible",
            endpoint_url: upstream.url,
            apiKey: `${providerKey}-wrong`,
            default_model: "fake-model",
          },
        }),
      ),
      201,
    );
    const prompt = await json(
      await api("/prompts", {
        body: { name: "say", role: "user", content_type: "jst", content: "return `say something`" },
      }),
      201,
    );
    const interaction = await json(
      await keep(
        await api("/interactions", {
          body: {
            name: "Leak",
            environment: environment.id,
            prompts: [{ type: "template", template: prompt.id }],
          },
        }),
      ),
      201,
    );
    const ok = await json(
      await keep(await api(`/interactions/${interaction.id}/execute`, { body: { data: {} } })),
    );
    expect(ok.status).toBe("completed");
    const failed = await keep(
      await api(`/interactions/${interaction.id}/execute`, {
        body: { data: {}, config: { environment: refused.id } },
      }),
    );
    expect(failed.status).toBeGreaterThanOrEqual(400);
    for (const path of [
      "/environments",
      `/environments/${environment.id}`,
      `/environments/${refused.id}`,
      `/interactions/${interaction.id}`,
      "/runs?limit=10",
      `/runs/${ok.id}`,
    ]) {
      await keep(await api(path));
    }
    // The gateway's metrics too.
    const metrics = await fetch(`${stack.gatewayUrl}/metrics`);
    expect(metrics.status).toBe(200);
    bodies.push(await metrics.text());
    // Some of them really were answered (the canary is not missing for want of answers).
    expect(bodies.join("\n")).toContain(environment.id);
    expect(upstream.requests.some((r) => r.headers.authorization === `Bearer ${providerKey}`)).toBe(
      true,
    );
    for (const body of bodies) expect(body).not.toContain(providerKey);
    // Every line each process wrote so far, at debug.
    const output = stack.output();
    expect(output.length).toBeGreaterThan(0);
    expect(output).not.toContain(providerKey);
    expect(output).not.toContain(internalToken);
  });
});
