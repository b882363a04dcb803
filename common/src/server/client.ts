import {
  Code,
  ConnectError,
  createClient,
  type Client,
  type Interceptor,
  type Transport,
} from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import type { DescService } from "@bufbuild/protobuf";
import { isConnectionError } from "../unavailable.js";
import { internalCredentialInterceptor } from "./internal-auth.js";
import { payloadsInterceptor } from "./payloads-interceptor.js";
import { clientTracingInterceptor, tracingEnabled } from "../tracing.js";
import { unaryTransport, type UnaryTransport } from "./unary-client.js";

/**
 * Turns a lost or refused connection to a peer into UNAVAILABLE naming the peer. connect-node
 * answers a reset as ABORTED ("read ECONNRESET", which would read as a conflict), a stream the dying
 * peer cancelled as CANCELED, and a refusal with the peer's address; callers get none of these: the
 * message names the service, the detail stays in `cause` for the logs.
 */
export function peerUnavailableInterceptor(peer: string): Interceptor {
  return (next) => async (req) => {
    try {
      return await next(req);
    } catch (err) {
      const lost =
        err instanceof ConnectError &&
        (((err.code === Code.Unavailable ||
          err.code === Code.Aborted ||
          err.code === Code.Internal) &&
          isConnectionError(err)) ||
          // The peer reset the stream (RST_STREAM CANCEL: it went away mid-call), not the caller.
          (err.code === Code.Canceled && !req.signal.aborted));
      if (!lost) throw err;
      throw new ConnectError(
        `the ${peer} service is unavailable`,
        Code.Unavailable,
        undefined,
        undefined,
        err,
      );
    }
  };
}

/**
 * The deadline of every internal call: reads and writes of catalog and runs answer in
 * milliseconds, and a call that hangs (a peer stuck on a lock, a half-open connection) must not
 * hold its caller for ever. A blocking execution takes at most the provider's time limit (2 min by
 * default) per attempt and repairs add attempts, so calls to the executor get longer. Past it the
 * call fails DEADLINE_EXCEEDED (504 at the gateway) and the callee's signal aborts (an execution is
 * then recorded as cancelled). The executor's bound covers the defaults' worst case with room:
 * 2 min per attempt × 3 SDK attempts × (1 + 5 repairs at most) = 36 min.
 */
export const PEER_DEADLINE_MS = 30_000;
export const EXECUTOR_DEADLINE_MS = 45 * 60_000;

/**
 * A transport to a peer service over one long-lived HTTP/2 connection (reconnecting on demand), so
 * that no call pays a connection setup. It speaks the Connect protocol with binary protobuf: the
 * same services answer gRPC too (grpc-js callers, Kubernetes probes), but for pies' own calls
 * Connect's unary framing costs measurably less CPU than gRPC's
 * (docs/decisions/0008-connect-protocol-json-to-runs.md); binary with every peer since the JSON
 * payloads are bytes (docs/decisions/0059-json-payloads-as-bytes.md). `peer` names the service in
 * errors ("the runs service is unavailable"). `internalToken`, when given, goes with every call (the callee refuses
 * calls without it).
 */
export function peerTransport(
  baseUrl: string,
  peer = "peer",
  internalToken?: string,
): UnaryTransport {
  const defaultTimeoutMs = peer === "executor" ? EXECUTOR_DEADLINE_MS : PEER_DEADLINE_MS;
  const interceptors = [
    peerUnavailableInterceptor(peer),
    ...(internalToken ? [internalCredentialInterceptor(internalToken)] : []),
    ...(tracingEnabled() ? [clientTracingInterceptor()] : []),
    payloadsInterceptor("client"),
  ];
  const connection = {
    pingIntervalMs: 30_000,
    idleConnectionTimeoutMs: 5 * 60_000,
  };
  // Unary calls (all of pies' own) over the lean Connect client (unary-client.ts: far less CPU
  // than connect-node's per call on either side, docs/decisions/0009-lean-unary-connect-path.md);
  // streaming ones over connect-node's.
  return unaryTransport({
    baseUrl,
    defaultTimeoutMs,
    interceptors,
    ...connection,
    streaming: () =>
      createConnectTransport({
        baseUrl,
        httpVersion: "2",
        useBinaryFormat: true,
        defaultTimeoutMs,
        // Peers are on the cluster network: compressing an answer cost the two sides more CPU
        // than sending it as it is (docs/decisions/0007-internal-calls-uncompressed.md).
        acceptCompression: [],
        pingIdleConnection: true,
        ...connection,
        interceptors,
      }),
  });
}

export function serviceClient<S extends DescService>(service: S, transport: Transport): Client<S> {
  return createClient(service, transport);
}
