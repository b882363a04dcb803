import { AsyncLocalStorage, AsyncResource } from "node:async_hooks";
import { describe, expect, it } from "vitest";
import { installAsyncResourceBind } from "./async-resource-bind.js";
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
