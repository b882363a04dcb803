import { AsyncResource } from "node:async_hooks";
import { deprecate } from "node:util";

/**
 * `AsyncResource.prototype.bind` as Node 20 has it, less two `util.deprecate` wrappers made at
 * every call. Node 20's own bind gives the bound function a deprecated `asyncResource` accessor
 * (DEP0172) whose getter and setter it wraps with `deprecate()` each time, and each wrapper has its
 * prototype set (`Object.setPrototypeOf`), several times the cost of this one. Node's HTTP/2 client
 * binds every request it makes (`ClientHttp2Session.request`: `reqAsync.bind(…)`), so that showed
 * in the gateway's profile (its call to the executor; figures in
 * docs/decisions/0013-per-call-costs-cut.md). The same bound function otherwise: named `bound`, run
 * in the resource's async scope with the caller's `this` (or, given a `thisArg`, Node's own
 * `runInAsyncScope.bind(…)`, named `bound runInAsyncScope`), `length` that of `fn`, and an
 * `asyncResource` accessor that reads and sets the resource, warning DEP0172 once per process as
 * Node does (its warnings are once per code).
 *
 * Installed only on a Node whose own bind still adds the `asyncResource` property (decided once,
 * when this module loads: `replacesNodeBind`). The property is End-of-Life upstream
 * (nodejs/node#58618): a Node without it keeps its own bind, and this goes when pies does not run
 * on a Node that has it.
 */
export function installAsyncResourceBind(): void {
  if (!replacesNodeBind || AsyncResource.prototype.bind === bind) return;
  AsyncResource.prototype.bind = bind;
}

/**
 * Whether `nodeBind` (an `AsyncResource.prototype.bind`) gives the functions it binds an
 * `asyncResource` property, the one this module's bind exists to make cheaply.
 */
export function bindAddsAsyncResource(nodeBind: AsyncResource["bind"]): boolean {
  return "asyncResource" in nodeBind.call(new AsyncResource("pies-bind-check"), () => {});
}

/** Whether `installAsyncResourceBind` replaces this Node's bind: decided once, at load. */
export const replacesNodeBind = bindAddsAsyncResource(AsyncResource.prototype.bind);

/** One wrapper for every accessor: Node's deprecation warnings are once per code. */
const warn = deprecate(
  () => {},
  "The asyncResource property on bound functions is deprecated",
  "DEP0172",
);

function bind<Func extends (...args: any[]) => any>(
  this: AsyncResource,
  fn: Func,
  thisArg?: ThisParameterType<Func>,
): Func {
  if (typeof fn !== "function") {
    const err = new TypeError(
      `The "fn" argument must be of type function. Received ${fn === null ? "null" : typeof fn}`,
    ) as TypeError & { code: string };
    err.code = "ERR_INVALID_ARG_TYPE";
    throw err;
  }
  const bound: (...args: unknown[]) => unknown =
    thisArg === undefined ? inScopeOf(this, fn) : this.runInAsyncScope.bind(this, fn, thisArg);
  const accessor = { resource: this };
  Object.defineProperties(bound, {
    length: { configurable: true, enumerable: false, value: fn.length, writable: false },
    asyncResource: {
      configurable: true,
      enumerable: true,
      get() {
        warn();
        return accessor.resource;
      },
      set(value: AsyncResource) {
        warn();
        accessor.resource = value;
      },
    },
  });
  return bound as Func;
}

/** `fn` run in `resource`'s async scope with the caller's `this` and arguments. */
function inScopeOf(resource: AsyncResource, fn: (...args: any[]) => unknown) {
  // Named as Node names its own (`bound`).
  return function bound(this: unknown, ...args: unknown[]) {
    return resource.runInAsyncScope(fn, this, ...args);
  };
}
