import { timingSafeEqual } from "node:crypto";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { Health } from "@pies/proto/health";

/**
 * Internal calls between pies processes carry one shared secret (`PIES_INTERNAL_TOKEN`, from a
 * Kubernetes Secret) as `authorization: Bearer <token>`. A shared secret rather than mTLS: the
 * peers speak cleartext HTTP/2 on the cluster network, a secret needs no certificate authority,
 * issuance or rotation machinery in the chart, and checking it costs one constant-time comparison
 * per call (a TLS session costs a handshake per connection and encryption per byte). Clusters that
 * want encryption in transit add a service mesh's mTLS underneath; the token still proves the caller
 * is pies. The embedded mode calls its services in memory and needs none
 * (docs/decisions/0042-internal-token-not-mtls.md).
 */
const HEADER = "authorization";
const SCHEME = "Bearer ";

/** The callee's check: a call without the token, or with another, is UNAUTHENTICATED. */
export function internalAuthInterceptor(token: string): Interceptor {
  const expected = Buffer.from(SCHEME + token);
  return (next) => async (req) => {
    // Health stays open: Kubernetes' gRPC probes send no credentials.
    if (req.service.typeName !== Health.typeName) {
      const given = Buffer.from(req.header.get(HEADER) ?? "");
      if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
        throw new ConnectError(
          "this service accepts only calls from pies' own processes (internal credential missing or wrong)",
          Code.Unauthenticated,
        );
      }
    }
    return next(req);
  };
}

/** The caller's side: every call on the transport carries the token. */
export function internalCredentialInterceptor(token: string): Interceptor {
  const value = SCHEME + token;
  return (next) => (req) => {
    req.header.set(HEADER, value);
    return next(req);
  };
}
