import { z } from "zod";
import { env, loadConfig } from "@pies/common";

export const runsConfigSchema = z.object({
  HOST: env.host(),
  PORT: env.port(50052),
  DATABASE_URL: z.string().min(1, "DATABASE_URL is required"),
  DATABASE_POOL_MAX: env.int(10, 1),
  LOG_LEVEL: env.logLevel(),
});

export type RunsConfig = z.infer<typeof runsConfigSchema>;

export const loadRunsConfig = (source?: Record<string, string | undefined>) =>
  loadConfig(runsConfigSchema, source);
