import { createClient, type ServiceImpl, type Transport } from "@connectrpc/connect";
import { Health, HealthCheckResponse_ServingStatus as Status } from "@pies/proto/health";

/** Service name whose check covers the dependencies (PostgreSQL, NATS, peers). */
const READINESS = "readiness";

/**
 * grpc.health.v1.Health. The empty service name answers SERVING while the process serves (a
 * liveness probe); `readiness` and the names of the services hosted here answer SERVING only when
 * `isReady` does (a readiness probe), and NOT_SERVING once shutdown has begun.
 */
export function createHealthService(
  isReady: () => Promise<boolean>,
  serviceNames: string[],
  isShuttingDown: () => boolean,
): ServiceImpl<typeof Health> {
  const check = async (service: string) => {
    if (isShuttingDown()) return Status.NOT_SERVING;
    if (service === "") return Status.SERVING;
    if (service !== READINESS && !serviceNames.includes(service)) return Status.SERVICE_UNKNOWN;
    return (await isReady()) ? Status.SERVING : Status.NOT_SERVING;
  };
  return {
    async check(req) {
      return { status: await check(req.service) };
    },
    async *watch(req, ctx) {
      let last: Status | undefined;
      while (!ctx.signal.aborted) {
        const status = await check(req.service);
        if (status !== last) yield { status };
        last = status;
        await new Promise((resolve) => setTimeout(resolve, 5000).unref());
      }
    },
  };
}

/** Whether every peer answers its health check for `service` with SERVING, within the timeout. */
export async function peersServing(
  peers: Transport[],
  service: string,
  timeoutMs = 2000,
): Promise<boolean> {
  const checks = await Promise.all(
    peers.map((transport) =>
      createClient(Health, transport)
        .check({ service }, { timeoutMs })
        .then(
          (r) => r.status === Status.SERVING,
          () => false,
        ),
    ),
  );
  return checks.every(Boolean);
}
