#!/usr/bin/env node
import { parseArgs } from "node:util";
import { ConfigError } from "@pies/common";
import { createDatabase } from "@pies/common/db";
import { loadRunsCliConfig, type RunsCliConfig } from "./config.js";
import { countDeadRecords } from "./dead-records.js";
import { replayDeadRecords } from "./dead-records-replay.js";
import type { RunsDatabase } from "./tables.js";

const usage = `pies-runs: administer a pies runs database (DATABASE_URL)

  pies-runs dead-records           how many records the writer could not decode are kept
  pies-runs replay-dead-records    write the dead records the current release decodes, and
                                   delete them; the others stay (PIES_RUN_RETENTION_DAYS as the
                                   service's: runs past it are not written back)

Every command prints JSON. Run it from the release whose decoder should read them (the image's
node services/runs/dist/cli.js, or npm run pies:runs -- <command>); it may run beside the runs
service. It applies no migration: the runs service does, at its start.`;

async function main(argv: string[]): Promise<number> {
  const { positionals, values } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: { help: { type: "boolean", short: "h" } },
  });
  const command = positionals[0];
  if (values.help || !command || command === "help") {
    process.stdout.write(usage + "\n");
    return command || values.help ? 0 : 2;
  }
  let config: RunsCliConfig;
  try {
    config = loadRunsCliConfig();
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    process.stderr.write(`${err.message}\n`);
    return 2;
  }
  const db = createDatabase<RunsDatabase>({
    url: config.DATABASE_URL,
    poolMax: 2,
    preparedStatements: config.DATABASE_PREPARED_STATEMENTS,
    applicationName: "pies-runs-cli",
  });
  const print = (value: unknown) => process.stdout.write(JSON.stringify(value, null, 2) + "\n");
  try {
    switch (command) {
      case "dead-records":
        print({ kept: await countDeadRecords(db) });
        return 0;
      case "replay-dead-records": {
        const replay = await replayDeadRecords(db, {
          retentionDays: config.PIES_RUN_RETENTION_DAYS,
        });
        print({ ...replay, kept: await countDeadRecords(db) });
        return 0;
      }
      default:
        process.stderr.write(`unknown command ${command}\n\n${usage}\n`);
        return 2;
    }
  } catch (err) {
    process.stderr.write(`pies-runs ${command}: ${(err as Error).message}\n`);
    return 1;
  } finally {
    await db.destroy();
  }
}

process.exitCode = await main(process.argv.slice(2));
