import { z } from "zod";
import { allowedEndpointsSetting, env, loadConfig } from "@pies/common";

export const catalogConfigSchema = z.object({
  HOST: env.host(),
  PORT: env.port(50051),
  DATABASE_URL: z.string().min(1, "DATABASE_URL is required"),
  DATABASE_POOL_MAX: env.int(10, 1),
  PIES_SECRET_KEY: z
    .string()
    .refine((v) => Buffer.from(v, "base64").length === 32, "must be 32 bytes, base64-encoded"),
  // Deployed: endpoints on loopback, private, link-local or metadata addresses only when listed.
  PIES_ALLOWED_ENDPOINTS: allowedEndpointsSetting(""),
  LOG_LEVEL: env.logLevel(),
});

export type CatalogConfig = z.infer<typeof catalogConfigSchema>;

export const loadCatalogConfig = (source?: Record<string, string | undefined>) =>
  loadConfig(catalogConfigSchema, source);
