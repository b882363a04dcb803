import type { JsonObject } from "./json.js";

/**
 * A virtual environment's routing (provider `virtual_lb`, DESIGN.md §7): its `config` is
 * `{"entries": [{"model": "<environment id>::<model id>", "weight": 2}, …], "failover": true}`;
 * an entry whose model part is empty uses that environment's default model. The catalog checks it
 * when the environment is written, the executor routes by it.
 */
export interface Routing {
  entries: RouteEntry[];
  /** A failure another provider could answer moves on to the next entry (before any chunk). */
  failover: boolean;
}

export interface RouteEntry {
  environmentId: string;
  /** "" for the environment's default model. */
  model: string;
  /** Positive; 1 when the entry gives none. */
  weight: number;
}

/** The provider of a virtual environment. */
export const VIRTUAL_PROVIDER = "virtual_lb";

/** Entries a virtual environment may have at most. */
export const MAX_ROUTE_ENTRIES = 32;

/** The routing of a virtual environment's config, or what is wrong with it (a message). */
export function routingOf(config: JsonObject): Routing | { invalid: string } {
  const { entries, failover } = config;
  if (!Array.isArray(entries) || entries.length === 0) {
    return { invalid: "config.entries: a virtual_lb environment needs at least one entry" };
  }
  if (entries.length > MAX_ROUTE_ENTRIES) {
    return { invalid: `config.entries: at most ${MAX_ROUTE_ENTRIES} entries` };
  }
  if (failover !== undefined && typeof failover !== "boolean") {
    return { invalid: "config.failover must be true or false" };
  }
  const parsed: RouteEntry[] = [];
  for (const [i, entry] of entries.entries()) {
    const at = `config.entries.${i}`;
    if (!entry || typeof entry !== "object" || Array.isArray(entry)) {
      return { invalid: `${at}: an entry is {"model": "<environment id>::<model>", "weight"}` };
    }
    const { model, weight } = entry;
    const split = typeof model === "string" ? model.indexOf("::") : -1;
    if (typeof model !== "string" || split <= 0) {
      return {
        invalid: `${at}.model must be "<environment id>::<model id>" (the model may be empty)`,
      };
    }
    if (
      weight !== undefined &&
      !(typeof weight === "number" && Number.isFinite(weight) && weight > 0)
    ) {
      return { invalid: `${at}.weight must be a positive number` };
    }
    parsed.push({
      environmentId: model.slice(0, split),
      model: model.slice(split + 2),
      weight: weight ?? 1,
    });
  }
  return { entries: parsed, failover: failover === true };
}
