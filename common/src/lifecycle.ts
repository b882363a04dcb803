import { ConfigError } from "./config.js";
import type { Logger } from "./logger.js";

/**
 * Runs `shutdown` once on SIGTERM or SIGINT, then exits. A second signal exits at once.
 */
export function onShutdown(logger: Logger, shutdown: () => Promise<void>): void {
  let stopping = false;
  const handle = (signal: NodeJS.Signals) => {
    if (stopping) process.exit(1);
    stopping = true;
    logger.info({ signal }, "shutting down");
    shutdown().then(
      () => process.exit(0),
      (err: unknown) => {
        logger.error({ err }, "shutdown failed");
        process.exit(1);
      },
    );
  };
  process.on("SIGTERM", handle);
  process.on("SIGINT", handle);
}

/** Logs a fatal start-up error without a stack for configuration errors, and exits 1. */
export function exitOnStartupError(logger: Logger) {
  return (err: unknown) => {
    if (err instanceof ConfigError) logger.fatal(err.message);
    else logger.fatal({ err }, "failed to start");
    process.exit(1);
  };
}

/**
 * The body of every `main.ts`: start the component, stop it gracefully on SIGTERM/SIGINT, exit 1
 * with the reason when it cannot start.
 */
export async function runProcess(
  logger: Logger,
  start: () => Promise<{ stop(): Promise<void> }>,
): Promise<void> {
  try {
    const running = await start();
    onShutdown(logger, () => running.stop());
  } catch (err) {
    exitOnStartupError(logger)(err);
  }
}
