import type { ReactNode } from "react";

/**
 * JSON as a tree whose objects and arrays fold (native <details>: keyboard and screen readers
 * work as with any disclosure); the first levels are open.
 */
export function JsonView({ value, label }: { value: unknown; label?: string }) {
  return (
    <div className="json-tree" aria-label={label}>
      <Node value={value} depth={0} />
    </div>
  );
}

function Node({ value, depth, name }: { value: unknown; depth: number; name?: string }): ReactNode {
  const key = name !== undefined && <span className="json-key">{JSON.stringify(name)}: </span>;
  if (value === null || typeof value !== "object") {
    return (
      <span>
        {key}
        <Leaf value={value} />
      </span>
    );
  }
  const entries = Array.isArray(value)
    ? value.map((v, i) => [String(i), v] as const)
    : Object.entries(value as Record<string, unknown>);
  const [open, close] = Array.isArray(value) ? ["[", "]"] : ["{", "}"];
  if (entries.length === 0) {
    return (
      <span>
        {key}
        {open}
        {close}
      </span>
    );
  }
  return (
    <details open={depth < 3}>
      <summary>
        {key}
        {open}
        <span className="json-count">
          {" "}
          {entries.length} {Array.isArray(value) ? "items" : "keys"}
        </span>
      </summary>
      <ul>
        {entries.map(([k, v]) => (
          <li key={k}>
            <Node value={v} depth={depth + 1} name={Array.isArray(value) ? undefined : k} />
          </li>
        ))}
      </ul>
      {close}
    </details>
  );
}

function Leaf({ value }: { value: unknown }) {
  if (typeof value === "string")
    return <span className="json-string">{JSON.stringify(value)}</span>;
  if (typeof value === "number") return <span className="json-number">{String(value)}</span>;
  if (typeof value === "boolean") return <span className="json-boolean">{String(value)}</span>;
  return <span className="json-null">null</span>;
}
