import { createTestStream } from "./nats.js";
import { createTestDatabase } from "./postgres.js";
import { startStack, type Stack, type StackOptions } from "./processes.js";

/**
 * The four processes (see {@link startStack}) on a database and a JetStream stream of their own,
 * made fresh on the shared servers for one test file. `stop` ends the processes (resolving with
 * their exit codes, as {@link Stack.stop} does) and then removes the stream and drops the database,
 * so that a test file needs one call to set up and one to clean up.
 */
export async function startTestStack(
  label: string,
  options: Omit<StackOptions, "databaseUrl" | "natsEnv"> = {},
): Promise<Stack> {
  const db = await createTestDatabase(label);
  const stream = createTestStream();
  const removeBoth = async () => {
    await stream.remove();
    await db.drop();
  };
  let stack: Stack;
  try {
    stack = await startStack({ ...options, databaseUrl: db.url, natsEnv: stream.env });
  } catch (err) {
    await removeBoth();
    throw err;
  }
  const stopProcesses = stack.stop;
  return {
    ...stack,
    async stop() {
      try {
        return await stopProcesses();
      } finally {
        await removeBoth();
      }
    },
  };
}
