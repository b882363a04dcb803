import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { loadCliConfig } from "./config.js";
import { SecretBox } from "./secrets.js";

describe("SecretBox", () => {
  it("seals and opens with its key", () => {
    const box = new SecretBox(randomBytes(32).toString("base64"));
    const sealed = box.seal("sk-provider");
    expect(sealed).not.toContain("sk-provider");
    expect(box.open(sealed)).toBe("sk-provider");
  });

  it("without a key, refuses to seal or open rather than use a made-up key", () => {
    const keyed = new SecretBox(randomBytes(32).toString("base64"));
    const keyless = new SecretBox(undefined);
    expect(() => keyless.seal("sk-provider")).toThrow(/PIES_SECRET_KEY is required/);
    expect(() => keyless.open(keyed.seal("sk-provider"))).toThrow(/PIES_SECRET_KEY is required/);
  });

  it("refuses a key that is not 32 bytes", () => {
    expect(() => new SecretBox(Buffer.alloc(16).toString("base64"))).toThrow(/32 bytes/);
  });
});

describe("the CLI's configuration", () => {
  it("needs DATABASE_URL; the secret key is optional but checked when given", () => {
    expect(() => loadCliConfig({})).toThrow("invalid configuration: DATABASE_URL: is required");
    expect(loadCliConfig({ DATABASE_URL: "postgres://db" })).toEqual({
      DATABASE_URL: "postgres://db",
    });
    expect(() => loadCliConfig({ DATABASE_URL: "postgres://db", PIES_SECRET_KEY: "abc" })).toThrow(
      "PIES_SECRET_KEY: must be 32 bytes, base64-encoded",
    );
  });
});
