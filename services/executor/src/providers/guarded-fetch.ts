import { isIP } from "node:net";
import { pipeline, type Readable } from "node:stream";
import { createBrotliDecompress, createGunzip, createInflate } from "node:zlib";
import { Agent, buildConnector, interceptors, type Dispatcher } from "undici";
import type { EndpointPolicy } from "@pies/common";

/**
 * Redirects followed, as undici's fetch (which the openai SDK used) followed them: the method and
 * body kept on 307 and 308 (a POST becomes a GET on 301, 302 and 303, as in fetch), the
 * `authorization` header dropped on a change of origin, each hop's connection through the same
 * policy. Fetch's limit was 20; an API endpoint that moved needs one or two.
 */
const MAX_REDIRECTIONS = 3;

/**
 * The connection pool whose every connection the endpoint policy allowed, redirects followed. A
 * redirect to an address the policy refuses is refused like a first request there.
 */
export function guardedAgent(policy: EndpointPolicy): Dispatcher {
  return poolOf(policy).compose(interceptors.redirect({ maxRedirections: MAX_REDIRECTIONS }));
}

function poolOf(policy: EndpointPolicy): Agent {
  const connector = buildConnector({ lookup: policy.lookup, timeout: 10_000 });
  /*
   * The connector checks the address each connection is about to use: the resolved addresses of a
   * name (its `lookup`), or the IP literal itself (which `net.connect` does not look up). A name
   * that passed when its environment was saved and resolves to a refused address now (DNS
   * rebinding) is refused here; no request reaches a refused address. Connections are reused
   * across calls and clients.
   */
  return new Agent({
    connect: (options, callback) => {
      try {
        policy.checkAddresses(
          options.hostname,
          isLiteral(options.hostname) ? [options.hostname] : [],
        );
      } catch (err) {
        callback(err as Error, null);
        return;
      }
      connector(options, callback);
    },
  });
}

const isLiteral = (hostname: string) => isIP(hostname.replace(/^\[(.*)\]$/, "$1")) !== 0;

/**
 * The body as sent, should a server compress it although no Accept-Encoding asked for it (fetch
 * asks for gzip and deflate; the provider client does not, which saves decompressing small JSON
 * bodies).
 */
export function decoded(encoding: string | string[] | undefined, body: Readable): Readable {
  const coding = (Array.isArray(encoding) ? encoding.join(",") : (encoding ?? ""))
    .trim()
    .toLowerCase();
  if (!coding || coding === "identity") return body;
  const decoder =
    coding === "gzip" || coding === "x-gzip"
      ? createGunzip()
      : coding === "deflate"
        ? createInflate()
        : coding === "br"
          ? createBrotliDecompress()
          : undefined;
  if (!decoder) return body;
  return pipeline(body, decoder, () => {});
}
