import { createClient, type Client, type Transport } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import type { DescService } from "@bufbuild/protobuf";

/**
 * A gRPC transport to a peer service over one long-lived HTTP/2 connection (reconnecting on
 * demand), so that no call pays a connection setup.
 */
export function grpcTransport(baseUrl: string): Transport {
  return createGrpcTransport({
    baseUrl,
    pingIntervalMs: 30_000,
    pingIdleConnection: true,
    idleConnectionTimeoutMs: 5 * 60_000,
  });
}

export function grpcClient<S extends DescService>(service: S, transport: Transport): Client<S> {
  return createClient(service, transport);
}
