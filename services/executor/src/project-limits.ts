import { Code, type ConnectError } from "@connectrpc/connect";
import { KeySlots, retryableError } from "@pies/common";

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
 * unaffected. `max` 0 means no limit.
 */
export class ProjectExecutions {
  private readonly slots: KeySlots;

  constructor(private readonly max: number) {
    this.slots = new KeySlots(max);
  }

  /** Executions `projectId` holds now. */
  count(projectId: string): number {
    return this.slots.count(projectId);
  }

  /**
   * Takes one of `projectId`'s execution slots, or throws RESOURCE_EXHAUSTED when it holds all of
   * them. Returns its release (calling it again does nothing).
   */
  take(projectId: string): () => void {
    const release = this.slots.take(projectId);
    if (!release) {
      throw overProjectLimit(
        `project ${projectId} has ${this.max} executions running, its limit; try again shortly`,
      );
    }
    return release;
  }
}
