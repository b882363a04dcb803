import type { Environment } from "@pies/proto/catalog";
import { configOf } from "../catalog-payloads.js";
import { HttpProviderClient, joinUrl, type ProviderHttpOptions } from "./http-client.js";
import { chatCompletionsWire } from "./openai.js";

/** The api-version asked for when the environment names none (`config.api_version`). */
export const DEFAULT_API_VERSION = "2024-10-21";

/**
 * Azure OpenAI: the chat-completions wire at a deployment,
 * `POST {endpoint}/openai/deployments/{deployment}/chat/completions?api-version=…`, with the key
 * in `api-key`. The model of a run is the deployment's name; the endpoint is the resource's
 * (`https://<resource>.openai.azure.com`), which an environment of this provider must give.
 */
export class AzureOpenAIClient extends HttpProviderClient {
  constructor(environment: Environment, apiKey: string, options: ProviderHttpOptions) {
    const configured = configOf(environment).api_version;
    const apiVersion =
      typeof configured === "string" && configured ? configured : DEFAULT_API_VERSION;
    const base = environment.endpointUrl;
    super(
      chatCompletionsWire(
        environment,
        (request) =>
          base
            ? joinUrl(
                base,
                `openai/deployments/${encodeURIComponent(request.model)}/chat/completions`,
                { "api-version": apiVersion },
              )
            : { invalid: ": an azure_openai environment needs the resource's endpoint_url" },
        ["api-key", apiKey.trim()],
      ),
      options,
    );
  }
}
