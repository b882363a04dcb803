import { Code, ConnectError } from "@connectrpc/connect";

export const notFound = (kind: string, id: string) =>
  new ConnectError(`${kind} ${id} not found`, Code.NotFound);

export const invalid = (message: string) => new ConnectError(message, Code.InvalidArgument);

export function requireProject(projectId: string): string {
  if (!projectId) throw invalid("project_id is required");
  return projectId;
}

/** Clamps a page size: default 100, at most 1000. */
export function pageSize(limit: number): number {
  return limit <= 0 ? 100 : Math.min(limit, 1000);
}
