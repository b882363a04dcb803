import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import { MethodOptions_IdempotencyLevel } from "@bufbuild/protobuf/wkt";
import type { DescMethod } from "@bufbuild/protobuf";
import type { Logger } from "@pies/common";
import type { CatalogChange, CatalogEvents } from "@pies/common/bus";
import { CatalogService } from "@pies/proto/catalog";

type Handler = (req: unknown, ctx: HandlerContext) => unknown;

/**
 * The catalog's writes: every unary method not declared `NO_SIDE_EFFECTS` in the proto (reads,
 * ResolveExecution and VerifyApiKey are). Writes built later are covered as soon as they exist.
 */
export const catalogWrites: readonly DescMethod[] = CatalogService.methods.filter(
  (m) =>
    m.methodKind === "unary" && m.idempotency !== MethodOptions_IdempotencyLevel.NO_SIDE_EFFECTS,
);

/**
 * Wraps the handlers of the catalog's writes so that each publishes a change event after it
 * succeeded. Best effort: the write's answer never waits for the bus nor fails with it.
 */
export function publishingChanges(
  impl: Partial<ServiceImpl<typeof CatalogService>>,
  events: CatalogEvents,
  logger: Logger,
): Partial<ServiceImpl<typeof CatalogService>> {
  const handlers = impl as Record<string, Handler | undefined>;
  const wrapped: Record<string, Handler | undefined> = { ...handlers };
  for (const method of catalogWrites) {
    const handler = handlers[method.localName];
    if (!handler) continue;
    wrapped[method.localName] = async (req, ctx) => {
      const res = await handler(req, ctx);
      try {
        events.publish(changeOf(method.name, req, res));
      } catch (err) {
        logger.warn({ err, method: method.name }, "catalog change event not published");
      }
      return res;
    };
  }
  return wrapped as Partial<ServiceImpl<typeof CatalogService>>;
}

/**
 * The change a write made, from its method's name (`CreateApiKey`: op create, kind apikey), its
 * request (`project_id`, `id`: a publish names the interaction published, not the new version)
 * and its answer (the new resource's id; a new project's id; the revision, its `updated_at`).
 */
export function changeOf(methodName: string, req: unknown, res: unknown): CatalogChange {
  const [, verb = methodName, noun = ""] = /^([A-Z][a-z]*)(.*)$/.exec(methodName) ?? [];
  const kind = noun.toLowerCase() || "catalog";
  const request = asRecord(req);
  const answer = asRecord(res);
  const projectId = nonEmpty(request?.projectId) ?? nonEmpty(asRecord(answer?.project)?.id);
  const resource =
    asRecord(answer?.[noun.charAt(0).toLowerCase() + noun.slice(1)]) ??
    Object.values(answer ?? {})
      .map(asRecord)
      .find((v) => typeof v?.id === "string");
  const id = nonEmpty(request?.id) ?? nonEmpty(resource?.id);
  const revision = millis(resource?.updatedAt ?? resource?.createdAt);
  return {
    kind,
    op: verb.toLowerCase(),
    ...(projectId ? { projectId } : {}),
    ...(id ? { id } : {}),
    ...(revision !== undefined ? { revision } : {}),
  };
}

/** A google.protobuf.Timestamp in milliseconds. */
function millis(value: unknown): number | undefined {
  const ts = asRecord(value);
  if (typeof ts?.seconds !== "bigint") return undefined;
  return Number(ts.seconds) * 1000 + Math.floor(Number(ts.nanos ?? 0) / 1e6);
}

function asRecord(value: unknown): Record<string, unknown> | undefined {
  return typeof value === "object" && value !== null
    ? (value as Record<string, unknown>)
    : undefined;
}

function nonEmpty(value: unknown): string | undefined {
  return typeof value === "string" && value ? value : undefined;
}
