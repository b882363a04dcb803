import { isIP } from "node:net";
import { Agent, buildConnector, fetch as undiciFetch } from "undici";
import type { EndpointPolicy } from "@pies/common";

/** A `fetch` for the openai SDK whose every connection the endpoint policy allowed. */
export interface GuardedFetch {
  fetch: typeof globalThis.fetch;
  /** Closes the connections it keeps alive. */
  close(): Promise<void>;
}

/**
 * One connection pool (an undici `Agent`) for every provider client, whose connector checks the
 * address each connection is about to use: the resolved addresses of a name (its `lookup`), or
 * the IP literal itself (which `net.connect` does not look up). A name that passed when its
 * environment was saved and resolves to a refused address now (DNS rebinding) is refused here;
 * no request reaches a refused address. Connections are reused across calls and clients.
 */
export function createGuardedFetch(policy: EndpointPolicy): GuardedFetch {
  const agent = guardedAgent(policy);
  const guarded = (
    input: Parameters<typeof undiciFetch>[0],
    init?: Parameters<typeof undiciFetch>[1],
  ) => undiciFetch(input, { ...init, dispatcher: agent });
  return {
    // undici's fetch is the one Node's global fetch is built on; their types differ in details.
    fetch: guarded as unknown as typeof globalThis.fetch,
    close: () => agent.close(),
  };
}

/** The connection pool whose every connection the endpoint policy allowed (see above). */
export function guardedAgent(policy: EndpointPolicy): Agent {
  const connector = buildConnector({ lookup: policy.lookup, timeout: 10_000 });
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
