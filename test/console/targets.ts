import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { expect } from "vitest";
import {
  expectJson,
  gatewayApi,
  startProcess,
  startTestStack,
  type ManagedProcess,
} from "@pies/testkit";

// The two ways pies runs that the console's browser tests drive: the embedded mode and the four
// processes.

export interface Target {
  name: string;
  url: string;
  adminKey: string;
  /** The sign-in link `npm start` prints (the embedded mode); built the same way otherwise. */
  signInLink: string;
  environment: string;
  output(): string;
  stop(): Promise<void>;
}

/** `npm start`'s process (node embedded/dist/main.js, as `npm start` runs it after building). */
export async function startEmbedded(): Promise<Target> {
  const dataDir = await mkdtemp(path.join(tmpdir(), "pies-console-embedded-"));
  const child: ManagedProcess = startProcess("console-embedded", "embedded/dist/main.js", {
    PORT: "0",
    PIES_DATA_DIR: dataDir,
  });
  const banner = await new Promise<string>((resolve, reject) => {
    const started = Date.now();
    const timer = setInterval(() => {
      const text = child.output();
      if (/Sign in: \S+/.test(text) && /API key: sk-/.test(text)) {
        clearInterval(timer);
        resolve(text);
      } else if (child.child.exitCode !== null || Date.now() - started > 90_000) {
        clearInterval(timer);
        reject(new Error(`the embedded mode did not come up:\n${text}`));
      }
    }, 100);
  });
  const url = /Console: (\S+)\/$/m.exec(banner)![1]!;
  const adminKey = /API key: (sk-\w+)/.exec(banner)![1]!;
  const signInLink = /Sign in: (\S+)/.exec(banner)![1]!;
  const environments = await expectJson<any[]>(
    await gatewayApi(url, adminKey)("/environments"),
    200,
  );
  return {
    name: "embedded",
    url,
    adminKey,
    signInLink,
    environment: environments[0].id,
    output: child.output,
    async stop() {
      expect(await child.stop()).toBe(0);
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}

/** The four processes as Kubernetes runs them, real PostgreSQL and NATS. */
export async function startFourProcesses(): Promise<Target> {
  const stack = await startTestStack("console");
  return {
    name: "four processes",
    url: stack.gatewayUrl,
    adminKey: stack.bootstrap.key,
    signInLink: `${stack.gatewayUrl}/#key=${stack.bootstrap.key}`,
    environment: stack.bootstrap.environment,
    output: stack.output,
    async stop() {
      expect(await stack.stop()).toEqual({ gateway: 0, executor: 0, runs: 0, catalog: 0 });
    },
  };
}

/**
 * A draft interaction of one jst template over `field` (a string), with this result schema, made
 * through the API on `target`'s test environment: what the browser tests execute and look at.
 * Answers its id and its prompt's.
 */
export async function createInteraction(
  target: Target,
  options: { name: string; promptName: string; template: string; field: string; result: object },
): Promise<{ id: string; promptId: string }> {
  const api = gatewayApi(target.url, target.adminKey);
  const json = <T>(response: Response) => expectJson<T>(response, 201, () => target.output());
  const prompt = await json<{ id: string }>(
    await api("/prompts", {
      body: {
        name: options.promptName,
        role: "user",
        content_type: "jst",
        content: options.template,
        inputSchema: { type: "object", properties: { [options.field]: { type: "string" } } },
      },
    }),
  );
  const interaction = await json<{ id: string }>(
    await api("/interactions", {
      body: {
        name: options.name,
        environment: target.environment,
        prompts: [{ type: "template", template: prompt.id }],
        result_schema: options.result,
      },
    }),
  );
  return { id: interaction.id, promptId: prompt.id };
}
