import type { Interceptor } from "@connectrpc/connect";
import { upgradePayloads, written } from "../legacy-payloads.js";

/**
 * The JSON payloads of a call as this release reads and writes them (legacy-payloads.ts): what
 * arrives (a server's request, a client's answer) with any old Struct/Value field moved into its
 * bytes, what leaves with the old fields too while PIES_WRITE_LEGACY_PAYLOADS is on. On both sides
 * of every internal call, so that the processes of two releases understand each other during a
 * rolling upgrade.
 */
export function payloadsInterceptor(side: "server" | "client"): Interceptor {
  return (next) => async (req) => {
    if (!req.stream) {
      if (side === "server") upgradePayloads(req.method.input, req.message);
      else written(req.method.input, req.message);
    }
    const res = await next(req);
    if (!res.stream) {
      if (side === "server") written(res.method.output, res.message);
      else upgradePayloads(res.method.output, res.message);
    }
    return res;
  };
}
