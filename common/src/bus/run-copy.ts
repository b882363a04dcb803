import type { Run } from "@pies/proto/runs";

/**
 * A shallow copy of a run with every field of Run present (those a run may leave unset as
 * undefined, which protobuf-es reads as unset), in one object literal: every copy has one hidden
 * class however the run was built (as run-binary.ts's zeroRun), and setting any field of it is a
 * plain store (the executor's endedRun; withoutPayloads). services/executor/src/call.test.ts
 * checks that it copies every field.
 */
export function copyRun(run: Run): Run {
  const copy: Run = {
    $typeName: "pies.runs.v1.Run",
    id: run.id,
    projectId: run.projectId,
    accountId: run.accountId,
    interactionId: run.interactionId,
    interactionName: run.interactionName,
    environmentId: run.environmentId,
    environmentName: run.environmentName,
    modelId: run.modelId,
    status: run.status,
    stream: run.stream,
    tags: run.tags,
    config: run.config,
    source: run.source,
    tokenUse: run.tokenUse,
    executionTime: run.executionTime,
    error: run.error,
    ttl: run.ttl,
    parentId: run.parentId,
    provider: run.provider,
    cached: run.cached,
    createdAt: run.createdAt,
    updatedAt: run.updatedAt,
    attempts: run.attempts,
    cachedFrom: run.cachedFrom,
    cacheKey: run.cacheKey,
    interactionStatus: run.interactionStatus,
    interactionPrompts: run.interactionPrompts,
    interactionUpdatedAt: run.interactionUpdatedAt,
    projectName: run.projectName,
    accountName: run.accountName,
    parametersJson: run.parametersJson,
    resultJson: run.resultJson,
    promptJson: run.promptJson,
    cachePolicyJson: run.cachePolicyJson,
    resultSchemaJson: run.resultSchemaJson,
    cost: run.cost,
    store: run.store,
  };
  // Fields of a newer writer, kept by fromBinary (a run read back from the log).
  if (run.$unknown !== undefined) copy.$unknown = run.$unknown;
  return copy;
}
