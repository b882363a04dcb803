import { request as httpRequest } from "node:http";
import { request as httpsRequest } from "node:https";
import type { EndpointPolicy } from "@pies/common";

/** The OpenAI API, where an `openai` environment without endpoint_url goes (as the SDK does). */
const OPENAI_BASE_URL = "https://api.openai.com/v1";
/** A model list is a small answer: more than this is not one. */
const MAX_BYTES = 1 << 20;

/**
 * `GET <base>/models` of an OpenAI-compatible provider: the ids it lists, or undefined when it
 * has no list (an error status, a body that is not one, a timeout, an unreachable host). The
 * connection goes only to addresses the endpoint policy allows (its `lookup` checks each).
 */
export async function providerModels(
  policy: EndpointPolicy,
  endpointUrl: string,
  apiKey: string,
  timeoutMs = 5000,
): Promise<string[] | undefined> {
  let url: URL;
  try {
    url = new URL(`${(endpointUrl || OPENAI_BASE_URL).replace(/\/+$/, "")}/models`);
    await policy.checkUrl(url.toString());
  } catch {
    return undefined;
  }
  const request = url.protocol === "https:" ? httpsRequest : httpRequest;
  const body = await new Promise<string | undefined>((resolve) => {
    const req = request(
      url,
      {
        method: "GET",
        lookup: policy.lookup,
        // The whole exchange, not only an idle socket: a provider trickling bytes is cut too.
        signal: AbortSignal.timeout(timeoutMs),
        headers: {
          accept: "application/json",
          ...(apiKey ? { authorization: `Bearer ${apiKey}` } : {}),
        },
      },
      (res) => {
        if (res.statusCode !== 200) {
          res.resume();
          return resolve(undefined);
        }
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => {
          text += chunk;
          if (text.length > MAX_BYTES) req.destroy();
        });
        res.on("end", () => resolve(text));
        res.on("error", () => resolve(undefined));
        res.on("close", () => resolve(undefined));
      },
    );
    req.on("error", () => resolve(undefined));
    req.on("close", () => resolve(undefined));
    req.end();
  });
  if (body === undefined) return undefined;
  try {
    const parsed = JSON.parse(body) as { data?: { id?: unknown }[] };
    if (!Array.isArray(parsed.data)) return undefined;
    return parsed.data.map((m) => m.id).filter((id): id is string => typeof id === "string");
  } catch {
    return undefined;
  }
}
