// Runs the fake OpenAI upstream on its own event loop (a worker thread), so the load generator's
// event loop in the main thread does not delay the upstream's answers, and the other way round.
import { parentPort, workerData } from "node:worker_threads";
import { startFakeOpenAI } from "@pies/common/testing";

const fake = await startFakeOpenAI(workerData);
parentPort.on("message", async (message) => {
  if (message === "close") {
    await fake.close();
    parentPort.postMessage({ closed: true });
    parentPort.close();
  }
});
parentPort.postMessage({ url: fake.url, port: fake.port });
