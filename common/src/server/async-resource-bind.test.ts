import { AsyncLocalStorage, AsyncResource } from "node:async_hooks";
import { once } from "node:events";
import { Worker } from "node:worker_threads";
import { describe, expect, it } from "vitest";
import {
  bindAddsAsyncResource,
  installAsyncResourceBind,
  replacesNodeBind,
} from "./async-resource-bind.js";
// What every pies process loads: the lean client installs it.
import "./unary-client.js";

describe("AsyncResource.prototype.bind without deprecation wrappers per call", () => {
  it("is what the processes use once the lean client is loaded", () => {
    const bound = new AsyncResource("test").bind(() => 1);
    const accessor = Object.getOwnPropertyDescriptor(bound, "asyncResource");
    // Node's wraps its getter with util.deprecate at each bind: a wrapper whose prototype is the
    // function it wraps. Here it is a plain function.
    expect(Object.getPrototypeOf(accessor?.get)).toBe(Function.prototype);
    installAsyncResourceBind(); // again: nothing changes
    expect(
      Object.getPrototypeOf(
        Object.getOwnPropertyDescriptor(
          new AsyncResource("t").bind(() => 1),
          "asyncResource",
        )?.get,
      ),
    ).toBe(Function.prototype);
  });

  it("is installed only over a bind that adds the asyncResource property", () => {
    // One that adds it (as Node 20's does) is replaced; one that does not (a Node where the
    // property is End-of-Life) is kept.
    const withProperty = function (this: AsyncResource, fn: () => unknown) {
      const bound = (...args: unknown[]) => this.runInAsyncScope(fn, undefined, ...args);
      return Object.defineProperty(bound, "asyncResource", { value: this, enumerable: true });
    } as AsyncResource["bind"];
    const without = function (this: AsyncResource, fn: () => unknown) {
      return this.runInAsyncScope.bind(this, fn, undefined);
    } as AsyncResource["bind"];
    expect(bindAddsAsyncResource(withProperty)).toBe(true);
    expect(bindAddsAsyncResource(without)).toBe(false);
  });

  it("decides by this Node's own bind, as a thread where it is not replaced sees it", async () => {
    const worker = new Worker(
      `const { parentPort } = require("node:worker_threads");
       const { AsyncResource } = require("node:async_hooks");
       parentPort.postMessage("asyncResource" in new AsyncResource("x").bind(() => {}));`,
      { eval: true },
    );
    const [nodeAddsIt] = (await once(worker, "message")) as [boolean];
    await worker.terminate();
    expect(replacesNodeBind).toBe(nodeAddsIt);
  });

  it("names the bound function as Node does", () => {
    const resource = new AsyncResource("t");
    expect(resource.bind(() => 1).name).toBe("bound");
    const withThis = resource.bind as (fn: () => unknown, thisArg: object) => () => unknown;
    expect(withThis.call(resource, () => 1, {}).name).toBe("bound runInAsyncScope");
  });

  it("runs the function in the resource's async scope, with the caller's this and arguments", () => {
    const storage = new AsyncLocalStorage<string>();
    const bound = storage.run("at bind", () =>
      AsyncResource.bind(function (this: unknown, a: number, b: number) {
        return { store: storage.getStore(), self: this, sum: a + b };
      }),
    );
    const target = { name: "target" };
    const result = storage.run("at call", () => bound.call(target, 2, 3));
    expect(result).toEqual({ store: "at bind", self: target, sum: 5 });
    expect(bound.length).toBe(2);
    // With a thisArg: that one.
    const withThis = new AsyncResource("t").bind as (
      fn: () => unknown,
      thisArg: object,
    ) => () => unknown;
    const fixed = withThis.call(
      new AsyncResource("t"),
      function (this: unknown) {
        return this;
      },
      target,
    );
    expect(fixed.call({ other: true })).toBe(target);
  });

  it("keeps the deprecated asyncResource accessor, warning DEP0172 once", async () => {
    const resource = new AsyncResource("test");
    const bound = resource.bind(() => 1) as (() => number) & { asyncResource: AsyncResource };
    const warnings: Error[] = [];
    const onWarning = (w: Error) => warnings.push(w);
    process.on("warning", onWarning);
    try {
      expect(bound.asyncResource).toBe(resource);
      const other = new AsyncResource("other");
      bound.asyncResource = other;
      expect(bound.asyncResource).toBe(other);
      expect(Object.keys(bound)).toContain("asyncResource");
      await new Promise((resolve) => setImmediate(resolve));
    } finally {
      process.off("warning", onWarning);
    }
    const dep = warnings.filter((w) => (w as Error & { code?: string }).code === "DEP0172");
    expect(dep).toHaveLength(1);
  });

  it("refuses what is not a function, as Node does", () => {
    expect(() => new AsyncResource("t").bind(5 as never)).toThrow(
      expect.objectContaining({ code: "ERR_INVALID_ARG_TYPE" }),
    );
  });
});
