import type { ReactNode } from "react";
import { childPointer, type MarkKind } from "./diff-marks";

const TITLES: Record<MarkKind, string> = {
  added: "added",
  removed: "removed",
  changed: "changed",
  moved: "moved",
};

/**
 * A result as indented JSON with the values a difference touches highlighted: on the original's
 * side what went (removed, replaced), on the candidate's what came (added, replaced); a moved
 * value on both. A text result is shown as text.
 */
export function MarkedJson({
  value,
  marks,
  side,
  label,
}: {
  value: unknown;
  marks?: Map<string, MarkKind>;
  side: "original" | "candidate" | "input";
  label: string;
}) {
  if (value === undefined) {
    return (
      <span className="marked-json-none" aria-label={label}>
        –
      </span>
    );
  }
  const body = typeof value === "string" ? value : render(value, "", marks ?? new Map(), side, "");
  const whole = typeof value === "string" ? marks?.get("") : undefined;
  return (
    <pre className="marked-json" aria-label={label} data-side={side}>
      {whole ? (
        <Mark kind={whole} side={side}>
          {body}
        </Mark>
      ) : (
        body
      )}
    </pre>
  );
}

function Mark({ kind, side, children }: { kind: MarkKind; side: string; children: ReactNode }) {
  const className = kind === "moved" ? "diff-moved" : side === "original" ? "diff-old" : "diff-new";
  return (
    <mark className={`diff-mark ${className}`} data-diff={kind} title={TITLES[kind]}>
      {children}
    </mark>
  );
}

/** The JSON text of `value` at `pointer`, as React nodes (a mark stops at the value it marks). */
function render(
  value: unknown,
  pointer: string,
  marks: Map<string, MarkKind>,
  side: string,
  indent: string,
): ReactNode {
  const kind = marks.get(pointer);
  const inner = kind ? new Map<string, MarkKind>() : marks;
  let out: ReactNode;
  if (Array.isArray(value)) {
    out =
      value.length === 0
        ? "[]"
        : [
            "[\n",
            ...value.map((item, i) => (
              <span key={i}>
                {indent}
                {"  "}
                {render(item, childPointer(pointer, i), inner, side, `${indent}  `)}
                {i < value.length - 1 ? ",\n" : "\n"}
              </span>
            )),
            `${indent}]`,
          ];
  } else if (value !== null && typeof value === "object") {
    const entries = Object.entries(value);
    out =
      entries.length === 0
        ? "{}"
        : [
            "{\n",
            ...entries.map(([k, v], i) => (
              <span key={k}>
                {indent}
                {"  "}
                <span className="json-key">{JSON.stringify(k)}</span>
                {": "}
                {render(v, childPointer(pointer, k), inner, side, `${indent}  `)}
                {i < entries.length - 1 ? ",\n" : "\n"}
              </span>
            )),
            `${indent}}`,
          ];
  } else {
    out = JSON.stringify(value) ?? "null";
  }
  return kind ? (
    <Mark kind={kind} side={side}>
      {out}
    </Mark>
  ) : (
    out
  );
}
