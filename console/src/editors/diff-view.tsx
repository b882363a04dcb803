import { json } from "@codemirror/lang-json";
import { defaultHighlightStyle, syntaxHighlighting } from "@codemirror/language";
import { unifiedMergeView } from "@codemirror/merge";
import { EditorState } from "@codemirror/state";
import { EditorView, lineNumbers } from "@codemirror/view";
import { useEffect, useRef } from "react";
import { styleNonce } from "./nonce";

export interface DiffViewProps {
  /** The older text (deletions are shown from it). */
  original: string;
  /** The newer text (the document shown). */
  changed: string;
  label: string;
  json?: boolean;
}

/**
 * The difference of two texts, one column (readable on a phone), by CodeMirror's merge package:
 * inserted lines marked, deleted ones shown in place; unchanged stretches collapsed.
 */
export default function DiffView({ original, changed, label, json: isJson }: DiffViewProps) {
  const host = useRef<HTMLDivElement>(null);
  useEffect(() => {
    if (!host.current) return;
    const view = new EditorView({
      parent: host.current,
      state: EditorState.create({
        doc: changed,
        extensions: [
          EditorView.cspNonce.of(styleNonce),
          lineNumbers(),
          EditorView.lineWrapping,
          EditorState.readOnly.of(true),
          EditorView.editable.of(false),
          EditorView.contentAttributes.of({ "aria-label": label }),
          syntaxHighlighting(defaultHighlightStyle, { fallback: true }),
          isJson ? json() : [],
          unifiedMergeView({
            original,
            mergeControls: false,
            highlightChanges: true,
            gutter: true,
            collapseUnchanged: { margin: 3, minSize: 6 },
          }),
        ],
      }),
    });
    return () => view.destroy();
  }, [original, changed, label, isJson]);
  return <div ref={host} className="code-editor" />;
}
