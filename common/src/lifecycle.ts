import { z } from "zod";
import { ConfigError, loadConfig } from "./config.js";
import { startTracing, tracingConfigSchema } from "./tracing.js";
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
 * What a pies process does with an error nothing caught: a rejected promise nobody awaited is a
 * bug in one request or background task, not in the process, so it is logged (error) and the
 * process keeps serving; an uncaught exception may have left any state half-changed, so it is
 * logged as fatal and the process exits 1 for its supervisor (Kubernetes) to restart it. Neither
 * is ever silent. Installed once per process.
 */
export function installProcessPolicy(logger: Logger): void {
  if (policyInstalled) return;
  policyInstalled = true;
  process.on("unhandledRejection", (reason) => {
    logger.error({ err: reason }, "unhandled rejection (the process keeps running)");
  });
  process.on("uncaughtException", (err, origin) => {
    logger.fatal({ err, origin }, "uncaught exception: exiting");
    // pino's default destination writes synchronously, so the line is out before the exit.
    process.exit(1);
  });
}
let policyInstalled = false;

/**
 * The body of every `main.ts`: install the process policy, start the component, stop it gracefully
 * on SIGTERM/SIGINT, exit 1 with the reason when it cannot start.
 */
export async function runProcess(
  logger: Logger,
  start: () => Promise<{ stop(): Promise<void> }>,
  /** The component's name in traces (tracing.ts); OTEL_EXPORTER_OTLP_ENDPOINT turns them on. */
  traceAs?: string,
): Promise<void> {
  installProcessPolicy(logger);
  try {
    // Before the component builds its servers and clients, which install the tracing hooks.
    const stopTracing = traceAs
      ? await startTracing(traceAs, loadConfig(z.object(tracingConfigSchema)))
      : async () => {};
    const running = await start();
    onShutdown(logger, async () => {
      await running.stop();
      await stopTracing();
    });
  } catch (err) {
    exitOnStartupError(logger)(err);
  }
}
