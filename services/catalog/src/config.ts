import { z } from "zod";
import {
  allowedEndpointsSetting,
  databaseSettingsSchema,
  env,
  loadConfig,
  natsConfigSchema,
  internalAuthConfigSchema,
} from "@pies/common";

export const catalogConfigSchema = z.object({
  HOST: env.host(),
  PORT: env.port(50051),
  DATABASE_URL: z.string().min(1, "DATABASE_URL is required"),
  DATABASE_POOL_MAX: env.int(10, 1),
  ...databaseSettingsSchema,
  PIES_SECRET_KEY: z
    .string()
    .refine((v) => Buffer.from(v, "base64").length === 32, "must be 32 bytes, base64-encoded"),
  // Deployed: endpoints on loopback, private, link-local or metadata addresses only when listed.
  PIES_ALLOWED_ENDPOINTS: allowedEndpointsSetting(""),
  // Change events go to <PIES_NATS_SUBJECT_PREFIX>.catalog.<project>.<kind> (core NATS).
  ...natsConfigSchema,
  ...internalAuthConfigSchema,
  LOG_LEVEL: env.logLevel(),
});

export type CatalogConfig = z.infer<typeof catalogConfigSchema>;

export const loadCatalogConfig = (source?: Record<string, string | undefined>) =>
  loadConfig(catalogConfigSchema, source);

/**
 * The `pies` CLI's settings: the database, and the secret key, which only sealing or opening a
 * provider key needs (no command does so today); without it such a call fails rather than using
 * a made-up key.
 */
export const cliConfigSchema = z.object({
  DATABASE_URL: z.string({ required_error: "is required" }).min(1, "is required"),
  PIES_SECRET_KEY: catalogConfigSchema.shape.PIES_SECRET_KEY.optional(),
});

export type CliConfig = z.infer<typeof cliConfigSchema>;

export const loadCliConfig = (source?: Record<string, string | undefined>) =>
  loadConfig(cliConfigSchema, source);
