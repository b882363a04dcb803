import type { JsonObject } from "@pies/common";
import { expect } from "vitest";
import { ProviderError } from "../src/providers/types.js";
import type { ChatMessage } from "../src/templates/render.js";

// What the provider clients' tests share: a prompt, an output schema, and how a call fails.

/** A system and a user message: 20 characters, 5 tokens as the fake counts (ceil(chars / 4)). */
export const messages: ChatMessage[] = [
  { role: "system", content: "Be brief." },
  { role: "user", content: "hello world" },
];

export const schema: JsonObject = {
  type: "object",
  required: ["greeting", "words"],
  properties: { greeting: { type: "string" }, words: { type: "integer", minimum: 1 } },
};

/** The ProviderError `promise` rejects with (the test fails if it resolves, or with another). */
export async function providerError(promise: Promise<unknown>): Promise<ProviderError> {
  const error = await promise.then(
    (value) => new Error(`resolved ${JSON.stringify(value)} instead of failing`),
    (err: unknown) => err,
  );
  expect(error).toBeInstanceOf(ProviderError);
  return error as ProviderError;
}
