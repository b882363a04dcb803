#!/usr/bin/env node
import { parseArgs } from "node:util";
import { createClient, createRouterTransport } from "@connectrpc/connect";
import { answered, ConfigError, createLogger, EndpointPolicy } from "@pies/common";
import { createDatabase, migrateToLatest } from "@pies/common/db";
import {
  apiKeyRoleFromName,
  apiKeyRoleName,
  apiKeyRoleNames,
  CatalogService,
} from "@pies/proto/catalog";
import { loadCliConfig, type CliConfig } from "./config.js";
import { migrations } from "./migrations/index.js";
import { SecretBox } from "./secrets.js";
import { seedAccount } from "./seed.js";
import { catalogRoutes } from "./service.js";
import type { CatalogDatabase } from "./tables.js";

const usage = `pies: administer a pies catalog database (DATABASE_URL)

  pies migrate                                        apply the catalog's migrations
  pies create-account --name NAME [--project NAME]    an account with a first project
  pies create-project --account ID --name NAME        another project of an account, with an admin key
  pies create-key --project ID [--name NAME] [--role admin|member]
                                                      an API key (printed once; admin by default)
  pies bootstrap [--name NAME]                        account, project, test environment, admin key

Every command prints JSON. Environments need PIES_SECRET_KEY (base64 of 32 bytes) to encrypt
provider keys; the other commands do not.`;

async function main(argv: string[]): Promise<number> {
  const { positionals, values } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      name: { type: "string" },
      project: { type: "string" },
      account: { type: "string" },
      role: { type: "string" },
      help: { type: "boolean", short: "h" },
    },
  });
  const command = positionals[0];
  if (values.help || !command || command === "help") {
    process.stdout.write(usage + "\n");
    return command || values.help ? 0 : 2;
  }
  let config: CliConfig;
  try {
    config = loadCliConfig();
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    process.stderr.write(`${err.message}\n`);
    return 2;
  }
  const db = createDatabase<CatalogDatabase>({
    url: config.DATABASE_URL,
    poolMax: 2,
    applicationName: "pies-cli",
  });
  try {
    await migrateToLatest(db, "catalog", migrations);
    // The same handlers as the service, called in memory: the CLI cannot drift from the API.
    const secrets = new SecretBox(config.PIES_SECRET_KEY);
    const logger = createLogger("pies-cli", "warn");
    // The CLI stores no endpoint (bootstrap's environment is the built-in test provider): the
    // strictest policy.
    const endpoints = new EndpointPolicy();
    const catalog = createClient(
      CatalogService,
      createRouterTransport(catalogRoutes({ db, secrets, logger, endpoints })),
    );
    const print = (value: unknown) =>
      process.stdout.write(
        JSON.stringify(value, (_k, v) => (typeof v === "bigint" ? String(v) : v), 2) + "\n",
      );
    switch (command) {
      case "migrate":
        print({ migrated: true });
        return 0;
      case "create-account": {
        const created = await catalog.createAccount({
          name: required(values.name, "--name"),
          projectName: values.project ?? "",
        });
        const account = answered(created.account, "account");
        const project = answered(created.project, "project");
        print({
          account: { id: account.id, name: account.name },
          project: { id: project.id, name: project.name },
        });
        return 0;
      }
      case "create-project": {
        const created = await catalog.createProject({
          accountId: required(values.account, "--account"),
          name: required(values.name, "--name"),
        });
        const project = answered(created.project, "project");
        const apiKey = answered(created.apiKey, "API key");
        print({
          project: { id: project.id, name: project.name, account: project.accountId },
          key: {
            id: apiKey.id,
            name: apiKey.name,
            role: apiKeyRoleName(apiKey.role),
            key: created.secret,
          },
        });
        return 0;
      }
      case "create-key": {
        // The operator, who holds the database, provisions keys for a project's owner: admin
        // unless asked otherwise (the API's default is member).
        const role = apiKeyRoleFromName(values.role ?? "admin");
        if (role === undefined)
          throw new Error(`--role must be one of ${apiKeyRoleNames.join(", ")}`);
        const created = await catalog.createApiKey({
          projectId: required(values.project, "--project"),
          name: values.name ?? "",
          role,
        });
        const apiKey = answered(created.apiKey, "API key");
        print({
          id: apiKey.id,
          name: apiKey.name,
          role: apiKeyRoleName(apiKey.role),
          project: apiKey.projectId,
          key: created.secret,
        });
        return 0;
      }
      case "bootstrap": {
        const seeded = await seedAccount(catalog, {
          account: values.name ?? "pies",
          project: values.project,
          key: "bootstrap",
        });
        print({
          account: seeded.accountId,
          project: seeded.projectId,
          environment: seeded.environmentId,
          key: seeded.key,
        });
        return 0;
      }
      default:
        process.stderr.write(`unknown command ${command}\n\n${usage}\n`);
        return 2;
    }
  } catch (err) {
    process.stderr.write(`pies ${command}: ${(err as Error).message}\n`);
    return 1;
  } finally {
    await db.destroy();
  }
}

function required(value: string | undefined, flag: string): string {
  if (!value) throw new Error(`${flag} is required`);
  return value;
}

process.exitCode = await main(process.argv.slice(2));
