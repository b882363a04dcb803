import { Code, type ConnectError } from "@connectrpc/connect";
import { retryableError } from "@pies/common";

/**
 * What a project over its share is told to wait: slots free up as soon as any of its executions or
 * renders ends (renders within the template time limit), so the shortest wait HTTP can express.
 */
const RETRY_AFTER_SECONDS = 1;

/** RESOURCE_EXHAUSTED (the gateway's 429) with a retry-after, for a project over its share. */
export function overProjectLimit(message: string): ConnectError {
  return retryableError(message, Code.ResourceExhausted, RETRY_AFTER_SECONDS);
}

/**
 * A per-project count of concurrent executions (blocking in flight, streamed running) in this
 * executor: a project that holds `max` gets RESOURCE_EXHAUSTED for the next, other projects are
 * unaffected. `max` 0 means no limit. Projects holding none are forgotten.
 */
export class ProjectExecutions {
  private readonly held = new Map<string, number>();

  constructor(private readonly max: number) {}

  /** Executions `projectId` holds now. */
  count(projectId: string): number {
    return this.held.get(projectId) ?? 0;
  }

  /**
   * Takes one of `projectId`'s execution slots, or throws RESOURCE_EXHAUSTED when it holds all of
   * them. Returns its release (calling it again does nothing).
   */
  take(projectId: string): () => void {
    const count = this.count(projectId);
    if (this.max > 0 && count >= this.max) {
      throw overProjectLimit(
        `project ${projectId} has ${this.max} executions running, its limit; try again shortly`,
      );
    }
    this.held.set(projectId, count + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const left = this.count(projectId) - 1;
      if (left > 0) this.held.set(projectId, left);
      else this.held.delete(projectId);
    };
  }
}
