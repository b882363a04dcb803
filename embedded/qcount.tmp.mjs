import { PGlite } from "@electric-sql/pglite";
import { mkdtempSync, rmSync } from "node:fs";
const counts = new Map(); let on = false;
for (const m of ["query", "exec"]) {
  const orig = PGlite.prototype[m];
  PGlite.prototype[m] = function (q, ...a) { if (on) { const k = m + ": " + String(q).replace(/\s+/g, " ").slice(0, 110); counts.set(k, (counts.get(k) ?? 0) + 1); } return orig.call(this, q, ...a); };
}
const { startEmbedded, loadEmbeddedConfig } = await import("@pies/embedded");
const { startFakeOpenAI } = await import("@pies/testkit");
const fake = await startFakeOpenAI({ latencyMs: 5, chunkDelayMs: 1 });
const dir = mkdtempSync("/tmp/pgl/e-");
const pies = await startEmbedded(loadEmbeddedConfig({ PIES_DATA_DIR: dir, PORT: "0", LOG_LEVEL: "warn", PIES_ALLOWED_ENDPOINTS: "loopback" }));
const api = async (p, body, method) => { const r = await fetch(pies.url + "/api/v1" + p, { method: method ?? (body ? "POST" : "GET"), headers: { authorization: "Bearer " + pies.apiKey, "content-type": "application/json" }, body: body && JSON.stringify(body) }); return r.headers.get("content-type")?.includes("json") ? r.json() : r.text(); };
const env = await api("/environments", { name: "e", provider: "openai_compatible", endpoint_url: fake.url, apiKey: "sk-x", default_model: "m" });
const pr = await api("/prompts", { name: "s", role: "user", content_type: "jst", content: "return `Summarise ${text}`", inputSchema: { type: "object", properties: { text: { type: "string" } } } });
const it = await api("/interactions", { name: "S", environment: env.id, prompts: [{ type: "template", template: pr.id }] });
for (const mode of ["streamed", "blocking"]) {
  for (let warm = 0; warm < 2; warm++) {
    counts.clear(); on = warm === 1;
    if (mode === "streamed") { const run = await api("/runs", { interaction: it.id, stream: true, data: { text: "hi" } }); await api(`/runs/${run.id}/stream`); }
    else await api(`/interactions/${it.id}/execute`, { data: { text: "hi" } });
    await new Promise((r) => setTimeout(r, 300));
  }
  console.log(mode); for (const [k, n] of counts) console.log("  ", n, k);
}
await pies.stop(); await fake.close(); rmSync(dir, { recursive: true, force: true });
