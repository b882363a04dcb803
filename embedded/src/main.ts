import { createLogger, exitOnStartupError, installProcessPolicy, onShutdown } from "@pies/common";
import { loadTokenizer } from "@pies/executor";
import { consoleDistDir } from "@pies/gateway";
import { loadEmbeddedConfig } from "./config.js";
import { setHeapGrowth } from "./heap.js";
import { startEmbedded } from "./start.js";

const logger = createLogger("pies");
installProcessPolicy(logger);
try {
  const config = loadEmbeddedConfig();
  setHeapGrowth(config.PIES_HEAP_GROWTH_PERCENT);
  const pies = await startEmbedded(config);
  const base = `${pies.url}/api/v1`;
  // The key goes to the terminal of whoever started pies, never to the log. The sign-in link
  // carries it in the fragment, which a browser never sends to a server.
  const consoleLines = consoleDistDir()
    ? [`Console: ${pies.url}/`, `Sign in: ${pies.url}/#key=${pies.apiKey}`, ""]
    : [];
  process.stdout.write(
    [
      "",
      `pies is running at ${base}`,
      `API key: ${pies.apiKey}`,
      "",
      ...consoleLines,
      "Try it:",
      `  curl -s -H "Authorization: Bearer ${pies.apiKey}" ${base}/environments`,
      "",
    ].join("\n") + "\n",
  );
  onShutdown(logger, () => pies.stop());
  // The test provider reports no usage: its runs are counted with the tokenizer, loaded now.
  setImmediate(loadTokenizer);
} catch (err) {
  exitOnStartupError(logger)(err);
}
