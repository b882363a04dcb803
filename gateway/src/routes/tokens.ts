import type { FastifyInstance } from "fastify";
import type { ZodTypeProvider } from "fastify-type-provider-zod";
import { z } from "zod";
import { bearer, credentialHash } from "../auth.js";
import { unauthorized } from "../errors.js";
import { errorResponse, tokenResponse } from "../json/responses.js";
import type { RouteContext } from "./context.js";

/**
 * `POST /token/issue` (at the root, where `@vertesia/client` asks its token server, and under
 * /api/v1): `Authorization: Bearer sk-…` → `{token, expires_at}`, a JWT the gateway then accepts as
 * the bearer (tokens.ts). Only a key is exchanged: a token cannot renew itself past its key's
 * revocation. `public` to the API's authentication hook: it checks the key itself.
 */
export function tokenRoutes(instance: FastifyInstance, ctx: RouteContext) {
  const app = instance.withTypeProvider<ZodTypeProvider>();
  app.post(
    "/token/issue",
    {
      config: { auth: "public" },
      schema: {
        summary: "Exchange an API key (as `Authorization: Bearer sk-…`) for a short-lived JWT",
        security: [{ bearer: [] }],
        // No fields: the key is the bearer. Declared so that a body which is not an object (null,
        // an array, a string…) is refused as on every other route.
        body: z.object({}).passthrough(),
        response: { 200: tokenResponse, default: errorResponse },
      },
    },
    async (request) => {
      const given = bearer(request);
      if (!given) throw unauthorized("token exchange needs `Authorization: Bearer <API key>`");
      const principal = await ctx.auth.authenticateKey(given, credentialHash(request, given));
      const { token, expiresAt } = await ctx.auth.tokens.issue(principal);
      return { token, expires_at: new Date(expiresAt * 1000).toISOString() };
    },
  );
}
