import { ConfigError } from "@pies/common";
import { loadCatalogConfig } from "@pies/catalog";
import { loadExecutorConfig } from "@pies/executor";
import { loadRunsConfig } from "@pies/runs";
import { describe, expect, it } from "vitest";
import { loadGatewayConfig } from "@pies/gateway";
import { loadEmbeddedConfig } from "./config.js";

describe("endpoint policy and auth settings", () => {
  const internal = { PIES_INTERNAL_TOKEN: "t".repeat(32) };
  const deployed = {
    ...internal,
    DATABASE_URL: "postgres://x",
    PIES_SECRET_KEY: Buffer.alloc(32).toString("base64"),
  };

  it("allow loopback endpoints in the embedded mode and none in the deployed one, by default", () => {
    expect(loadEmbeddedConfig({}).PIES_ALLOWED_ENDPOINTS).toBe("loopback");
    expect(loadExecutorConfig(internal).PIES_ALLOWED_ENDPOINTS).toBe("");
    expect(loadCatalogConfig(deployed).PIES_ALLOWED_ENDPOINTS).toBe("");
  });

  it("refuse an allow list entry that is no host, IP, CIDR or class at start", () => {
    expect(() =>
      loadExecutorConfig({ ...internal, PIES_ALLOWED_ENDPOINTS: "10.0.0.0/40" }),
    ).toThrow(ConfigError);
    expect(() => loadCatalogConfig({ ...deployed, PIES_ALLOWED_ENDPOINTS: "http://x/" })).toThrow(
      /PIES_ALLOWED_ENDPOINTS/,
    );
    expect(
      loadExecutorConfig({ ...internal, PIES_ALLOWED_ENDPOINTS: "loopback,10.0.0.0/8,ollama.svc" })
        .PIES_ALLOWED_ENDPOINTS,
    ).toBe("loopback,10.0.0.0/8,ollama.svc");
  });

  it("cache refused keys for 5 s unless configured", () => {
    expect(loadGatewayConfig(internal).PIES_AUTH_NEGATIVE_CACHE_SECONDS).toBe(5);
    expect(
      loadGatewayConfig({ ...internal, PIES_AUTH_NEGATIVE_CACHE_SECONDS: "0" })
        .PIES_AUTH_NEGATIVE_CACHE_SECONDS,
    ).toBe(0);
  });

  it("require the internal credential of every deployed process, and not of the embedded mode", () => {
    const { PIES_INTERNAL_TOKEN: _, ...withoutToken } = deployed;
    for (const load of [loadCatalogConfig, loadRunsConfig, loadExecutorConfig, loadGatewayConfig]) {
      expect(() => load(withoutToken)).toThrow(/PIES_INTERNAL_TOKEN: is required/);
      expect(() => load({ ...withoutToken, PIES_INTERNAL_TOKEN: "short" })).toThrow(
        /PIES_INTERNAL_TOKEN: must be at least 32 characters/,
      );
    }
    expect(() => loadEmbeddedConfig({})).not.toThrow();
  });
});

describe("database settings", () => {
  const deployed = {
    PIES_INTERNAL_TOKEN: "t".repeat(32),
    DATABASE_URL: "postgres://x",
    PIES_SECRET_KEY: Buffer.alloc(32).toString("base64"),
  };

  it("prepare the statements run most unless DATABASE_PREPARED_STATEMENTS is false", () => {
    for (const load of [loadCatalogConfig, loadRunsConfig, loadEmbeddedConfig]) {
      expect(load(deployed).DATABASE_PREPARED_STATEMENTS).toBe(true);
      expect(load({ ...deployed, DATABASE_PREPARED_STATEMENTS: "false" })).toMatchObject({
        DATABASE_PREPARED_STATEMENTS: false,
      });
      expect(() => load({ ...deployed, DATABASE_PREPARED_STATEMENTS: "no" })).toThrow(
        /DATABASE_PREPARED_STATEMENTS/,
      );
    }
  });

  it("start the record writer's batches at least 10 ms apart unless configured", () => {
    expect(loadRunsConfig(deployed).PIES_RECORD_BATCH_INTERVAL_MS).toBe(10);
    expect(
      loadRunsConfig({ ...deployed, PIES_RECORD_BATCH_INTERVAL_MS: "0" })
        .PIES_RECORD_BATCH_INTERVAL_MS,
    ).toBe(0);
    expect(() => loadRunsConfig({ ...deployed, PIES_RECORD_BATCH_INTERVAL_MS: "5000" })).toThrow(
      /PIES_RECORD_BATCH_INTERVAL_MS/,
    );
  });
});
