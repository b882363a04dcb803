import { pino, type Logger } from "pino";

export type { Logger };

/** Paths that may carry secrets; pino replaces their values before anything is written. */
const redact = [
  "apiKey",
  "api_key",
  "secret",
  "authorization",
  "*.apiKey",
  "*.api_key",
  "*.secret",
  "*.authorization",
  "req.headers.authorization",
  "headers.authorization",
];

export function createLogger(name: string, level = "info"): Logger {
  return pino({ name, level, redact: { paths: redact, censor: "[redacted]" } });
}
