import { create } from "@bufbuild/protobuf";
import type { JsonObject } from "@pies/common";
import { InteractionSchema, type Interaction } from "@pies/proto/catalog";
import { beforeAll, describe, expect, it, vi } from "vitest";
import { JstSandbox } from "./jst.js";
import { PromptRenderer, PromptTooLarge, TemplateError } from "./render.js";

let jst: JstSandbox;
let renderer: PromptRenderer;
beforeAll(async () => {
  jst = await JstSandbox.create({ timeoutMs: 100, memoryBytes: 16 * 1024 * 1024 });
  renderer = new PromptRenderer(jst, { maxPromptBytes: 64 * 1024 });
});

let ids = 0;
interface TemplateInit {
  id?: string;
  name?: string;
  role?: string;
  contentType?: string;
  content?: string;
}
type Segment = { template: TemplateInit } | { chat: string } | { missing: string };

function interaction(...segments: Segment[]): Interaction {
  return create(InteractionSchema, {
    id: "int-1",
    name: "Test",
    prompts: segments.map((s) => {
      const id = `seg-${++ids}`;
      if ("chat" in s) return { id, type: "chat", chatPath: s.chat };
      if ("missing" in s) return { id, type: "template", templateId: s.missing };
      const templateId = s.template.id ?? `tpl-${ids}`;
      return {
        id,
        type: "template",
        templateId,
        template: {
          id: templateId,
          name: s.template.name ?? `t${ids}`,
          role: "user",
          contentType: "jst",
          ...s.template,
        },
      };
    }),
  });
}

async function renderError(i: Interaction, data: JsonObject): Promise<TemplateError> {
  let thrown: unknown;
  try {
    thrown = new Error(
      `rendered ${JSON.stringify(await renderer.render(i, data))} instead of failing`,
    );
  } catch (err) {
    thrown = err;
  }
  expect(thrown).toBeInstanceOf(TemplateError);
  return thrown as TemplateError;
}

describe("PromptRenderer", () => {
  it("renders handlebars without HTML escaping", async () => {
    const i = interaction({
      template: {
        contentType: "handlebars",
        content:
          "Review <{{code}}> by {{user.name}} & {{{raw}}}: {{#each tags}}[{{this}}]{{/each}}",
      },
    });
    expect(
      await renderer.render(i, {
        code: "a < b && c > \"d\" 'e'",
        user: { name: "O'Brien & Co" },
        raw: "<b>",
        tags: ["x", "y"],
      }),
    ).toEqual([
      { role: "user", content: "Review <a < b && c > \"d\" 'e'> by O'Brien & Co & <b>: [x][y]" },
    ]);
  });

  it("renders the same handlebars template with different data (compiled once, no stale output)", async () => {
    const i = interaction({ template: { contentType: "handlebars", content: "Hello {{name}}" } });
    expect((await renderer.render(i, { name: "Ada" }))[0]?.content).toBe("Hello Ada");
    expect((await renderer.render(i, { name: "Grace" }))[0]?.content).toBe("Hello Grace");
    expect((await renderer.render(i, {}))[0]?.content).toBe("Hello ");
  });

  it("does not let handlebars reach prototype properties", async () => {
    const i = interaction({
      template: { contentType: "handlebars", content: "[{{constructor.name}}][{{__proto__}}]" },
    });
    expect((await renderer.render(i, {}))[0]?.content).toBe("[][]");
  });

  it("reports a handlebars syntax error as a TemplateError naming the template", async () => {
    const i = interaction({
      template: { name: "broken", contentType: "handlebars", content: "Hello {{#if x}}" },
    });
    expect((await renderError(i, { x: true })).message).toMatch(/^prompt template broken: /);
  });

  it("passes text templates verbatim (no placeholders expanded)", async () => {
    const content = "Literal ${name} and {{name}} and `ticks` \\n stay";
    const i = interaction({ template: { contentType: "text", content } });
    expect(await renderer.render(i, { name: "Ada" })).toEqual([{ role: "user", content }]);
  });

  it("renders jst, and treats an empty content type as jst", async () => {
    const i = interaction(
      { template: { contentType: "jst", content: "Hello ${name}" } },
      { template: { contentType: "", content: "return name.toUpperCase()" } },
    );
    expect((await renderer.render(i, { name: "Ada" })).map((m) => m.content)).toEqual([
      "Hello Ada",
      "ADA",
    ]);
  });

  it("rejects an unknown content type", async () => {
    const i = interaction({ template: { name: "odd", contentType: "mustache", content: "x" } });
    expect((await renderError(i, {})).message).toBe(
      "prompt template odd: content type mustache is not supported",
    );
  });

  it("wraps a jst failure with the template's name (or id when it has none)", async () => {
    const named = interaction({ template: { name: "greet", content: "return missing.x" } });
    expect((await renderError(named, {})).message).toMatch(
      /^prompt template greet: ReferenceError: /,
    );
    const unnamed = interaction({ template: { id: "tpl-xyz", name: "", content: "return (;" } });
    expect((await renderError(unnamed, {})).message).toMatch(
      /^prompt template tpl-xyz: SyntaxError: /,
    );
  });

  it("keeps each template's role, in segment order, and falls back to user for an unknown role", async () => {
    const i = interaction(
      { template: { role: "system", contentType: "text", content: "You are terse." } },
      { template: { role: "assistant", contentType: "text", content: "Understood." } },
      { template: { role: "user", contentType: "handlebars", content: "Q: {{q}}" } },
      { template: { role: "tool", contentType: "text", content: "odd role" } },
      { template: { role: "", contentType: "text", content: "no role" } },
    );
    expect(await renderer.render(i, { q: "why?" })).toEqual([
      { role: "system", content: "You are terse." },
      { role: "assistant", content: "Understood." },
      { role: "user", content: "Q: why?" },
      { role: "user", content: "odd role" },
      { role: "user", content: "no role" },
    ]);
  });

  it("expands a chat segment from the data, between templates, following a dotted path", async () => {
    const i = interaction(
      { template: { role: "system", contentType: "text", content: "Be kind." } },
      { chat: "conversation.history" },
      { template: { role: "user", contentType: "jst", content: "Now: ${question}" } },
    );
    const history = [
      { role: "user", content: "Hi" },
      { role: "assistant", content: "Hello!" },
      { role: "system", content: "note" },
    ];
    expect(await renderer.render(i, { conversation: { history }, question: "bye?" })).toEqual([
      { role: "system", content: "Be kind." },
      ...history,
      { role: "user", content: "Now: bye?" },
    ]);
  });

  it("keeps only role and content of chat messages, and accepts an empty history", async () => {
    const i = interaction({ chat: "messages" });
    expect(
      await renderer.render(i, { messages: [{ role: "user", content: "x", name: "n", extra: 1 }] }),
    ).toEqual([{ role: "user", content: "x" }]);
    expect(await renderer.render(i, { messages: [] })).toEqual([]);
  });

  it("rejects a chat path that is missing or not an array", async () => {
    const i = interaction({ chat: "chat.messages" });
    const message = "input chat.messages must be an array of messages";
    expect((await renderError(i, {})).message).toBe(message);
    expect((await renderError(i, { chat: "text" })).message).toBe(message);
    expect(
      (await renderError(i, { chat: { messages: { role: "user", content: "x" } } })).message,
    ).toBe(message);
    expect((await renderError(i, { chat: { messages: "x" } })).message).toBe(message);
  });

  it("rejects chat messages of the wrong shape, naming the index", async () => {
    const i = interaction({ chat: "m" });
    const ok = { role: "user", content: "fine" };
    expect((await renderError(i, { m: [ok, { role: "robot", content: "x" }] })).message).toBe(
      "input m[1] must be {role, content}",
    );
    expect((await renderError(i, { m: [{ role: "user", content: 42 }] })).message).toBe(
      "input m[0] must be {role, content}",
    );
    expect((await renderError(i, { m: [{ content: "x" }] })).message).toBe(
      "input m[0] must be {role, content}",
    );
    expect((await renderError(i, { m: [ok, ok, null] })).message).toBe(
      "input m[2] must be {role, content}",
    );
    expect((await renderError(i, { m: ["user: hi"] })).message).toBe(
      "input m[0] must be {role, content}",
    );
  });

  it("fails when a template segment has no template", async () => {
    expect((await renderError(interaction({ missing: "tpl-gone" }), {})).message).toBe(
      "prompt template tpl-gone is missing",
    );
  });

  it("renders an interaction without segments to no messages", async () => {
    expect(await renderer.render(interaction(), { a: 1 })).toEqual([]);
  });

  it("refuses a NUL in a template's output, whole or inside JSON, rather than cutting it off", async () => {
    for (const content of ["return 'a' + String.fromCharCode(0) + 'b'", "a\\u0000b"]) {
      const i = interaction({ template: { name: "nul", content } });
      expect((await renderError(i, {})).message).toBe(
        "prompt template nul: its output contains a NUL character (\\u0000), which a prompt cannot hold",
      );
    }
    // A lone surrogate is no NUL: it comes out whole (the check is not a length comparison).
    const lone = interaction({ template: { content: "return 'x' + String.fromCharCode(0xd800)" } });
    expect((await renderer.render(lone, {}))[0]!.content).toBe("x\ud800");
    // Escaped inside JSON text it is six ordinary characters, and kept.
    const json = interaction({ template: { content: "return {s: 'a' + String.fromCharCode(0)}" } });
    expect((await renderer.render(json, {}))[0]!.content).toBe('{"s":"a\\u0000"}');
  });

  it("refuses a prompt over maxPromptBytes, counting UTF-8 bytes over all segments", async () => {
    const big = (n: number) => ({
      template: { name: `big${n}`, content: `return "é".repeat(${n})` },
    });
    // 64 KiB is the limit here: two segments of 16,384 two-byte characters reach it exactly.
    const fits = await renderer.render(interaction(big(16_384), big(16_384)), {});
    expect(fits.map((m) => m.content.length)).toEqual([16_384, 16_384]);
    const over = interaction(big(16_384), big(16_385));
    let thrown: unknown;
    await renderer.render(over, {}).catch((err: unknown) => (thrown = err));
    expect(thrown).toBeInstanceOf(PromptTooLarge);
    expect((thrown as Error).message).toBe(
      "the rendered prompt is larger than 65536 bytes (PIES_MAX_PROMPT_BYTES), reached at prompt template big16385",
    );
  });

  it("applies the NUL check and the size limit to a template rendered on the fast path", async () => {
    const sandboxed = vi.spyOn(jst, "renderInSandbox");
    try {
      const nul = interaction({ template: { name: "nul", content: "Text: ${text}" } });
      expect((await renderError(nul, { text: "a\u0000b" })).message).toBe(
        "prompt template nul: its output contains a NUL character (\\u0000), which a prompt cannot hold",
      );
      const big = interaction({ template: { name: "big", content: "return `${a}${b}`" } });
      const fits = await renderer.render(big, { a: "é".repeat(16_384), b: "é".repeat(16_384) });
      expect(fits[0]!.content.length).toBe(32_768);
      let thrown: unknown;
      await renderer
        .render(big, { a: "é".repeat(16_384), b: "é".repeat(16_385) })
        .catch((err: unknown) => (thrown = err));
      expect(thrown).toBeInstanceOf(PromptTooLarge);
      expect((thrown as Error).message).toBe(
        "the rendered prompt is larger than 65536 bytes (PIES_MAX_PROMPT_BYTES), reached at prompt template big",
      );
      expect(sandboxed).not.toHaveBeenCalled();
    } finally {
      sandboxed.mockRestore();
    }
  });
});

describe("renderTemplate (one template, POST /prompts/:id/render)", () => {
  const template = (content: string, contentType = "jst") => ({
    id: "tpl-one",
    name: "one",
    contentType,
    content,
  });

  it("renders each content type as a segment of it would", async () => {
    expect(await renderer.renderTemplate(template("return `Hi ${who}`"), { who: "Ann" })).toBe(
      "Hi Ann",
    );
    expect(await renderer.renderTemplate(template("{{who}}!", "handlebars"), { who: "<b>" })).toBe(
      "<b>!",
    );
    expect(await renderer.renderTemplate(template("${who}", "text"), { who: "x" })).toBe("${who}");
  });

  it("refuses a template error, a NUL and a text over the limit as an execution does", async () => {
    await expect(renderer.renderTemplate(template("return `${nobody}`"), {})).rejects.toThrow(
      TemplateError,
    );
    await expect(
      renderer.renderTemplate(template("return `a${z}`"), { z: "\u0000" }),
    ).rejects.toThrow(/prompt template one: its output contains a NUL character/);
    await expect(
      renderer.renderTemplate(template("return `${a}`"), { a: "x".repeat(64 * 1024 + 1) }),
    ).rejects.toThrow(PromptTooLarge);
  });
});
