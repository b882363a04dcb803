import { createClient, type Client, type Transport } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import type { DescService } from "@bufbuild/protobuf";

/**
 * A transport to a peer service over one long-lived HTTP/2 connection (reconnecting on demand), so
 * that no call pays a connection setup. It speaks the Connect protocol with binary protobuf: the
 * same services answer gRPC too (grpc-js callers, Kubernetes probes), but for pies' own calls
 * Connect's unary framing costs measurably less CPU than gRPC's (about +20% throughput at
 * concurrency 16 in the benchmark).
 */
export function peerTransport(baseUrl: string): Transport {
  return createConnectTransport({
    baseUrl,
    httpVersion: "2",
    useBinaryFormat: true,
    pingIntervalMs: 30_000,
    pingIdleConnection: true,
    idleConnectionTimeoutMs: 5 * 60_000,
  });
}

export function serviceClient<S extends DescService>(service: S, transport: Transport): Client<S> {
  return createClient(service, transport);
}
