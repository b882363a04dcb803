import { defaultKeymap, history, historyKeymap } from "@codemirror/commands";
import { javascript } from "@codemirror/lang-javascript";
import { json } from "@codemirror/lang-json";
import {
  bracketMatching,
  defaultHighlightStyle,
  StreamLanguage,
  syntaxHighlighting,
} from "@codemirror/language";
import { EditorState, type Extension } from "@codemirror/state";
import {
  EditorView,
  highlightActiveLine,
  keymap,
  lineNumbers,
  placeholder as placeholderText,
} from "@codemirror/view";
import { useEffect, useRef } from "react";
import { styleNonce } from "./nonce";

/** What an editor holds: a template of one of pies' content types, or JSON. */
export type EditorLanguage = "jst" | "handlebars" | "text" | "json";

export interface CodeEditorProps {
  value: string;
  onChange?: (value: string) => void;
  language: EditorLanguage;
  /** The accessible name of the editing area (a CodeMirror editor is not an <input>). */
  label: string;
  readOnly?: boolean;
  placeholder?: string;
  /** Marks the editor invalid (its message is shown by the caller, next to it). */
  invalid?: boolean;
  testId?: string;
}

/**
 * Handlebars has no CodeMirror 6 package: its `{{…}}` expressions are all the highlighting a
 * prompt needs, so a stream tokenizer marks them and leaves the text between plain.
 */
const handlebars = StreamLanguage.define<{ inside: boolean }>({
  name: "handlebars",
  startState: () => ({ inside: false }),
  token(stream, state) {
    if (!state.inside) {
      if (stream.match("{{")) {
        state.inside = true;
        return "bracket";
      }
      stream.next();
      while (!stream.eol() && !stream.match("{{", false)) stream.next();
      return null;
    }
    if (stream.match("}}")) {
      state.inside = false;
      return "bracket";
    }
    if (stream.match(/^[#/^]\w+/)) return "keyword";
    if (stream.match(/^"[^"]*"/)) return "string";
    if (stream.match(/^[\w.@]+/)) return "variableName";
    stream.next();
    return null;
  },
});

function languageOf(language: EditorLanguage): Extension {
  switch (language) {
    case "json":
      return json();
    case "jst":
      return javascript();
    case "handlebars":
      return handlebars;
    default:
      return [];
  }
}

/**
 * A CodeMirror 6 editor, loaded with the pages that edit (never on the first load). Tab moves the
 * focus on, as in any form field (no `indentWithTab`): the keyboard never gets stuck in it.
 */
export default function CodeEditor({
  value,
  onChange,
  language,
  label,
  readOnly,
  placeholder,
  invalid,
  testId,
}: CodeEditorProps) {
  const host = useRef<HTMLDivElement>(null);
  const view = useRef<EditorView | null>(null);
  const changed = useRef(onChange);
  changed.current = onChange;

  useEffect(() => {
    // Effects run after the element is in place.
    if (!host.current) return;
    const editor = new EditorView({
      parent: host.current,
      state: EditorState.create({
        doc: value,
        extensions: [
          EditorView.cspNonce.of(styleNonce),
          lineNumbers(),
          history(),
          bracketMatching(),
          highlightActiveLine(),
          syntaxHighlighting(defaultHighlightStyle, { fallback: true }),
          keymap.of([...defaultKeymap, ...historyKeymap]),
          EditorView.lineWrapping,
          EditorState.readOnly.of(Boolean(readOnly)),
          EditorView.editable.of(!readOnly),
          EditorView.contentAttributes.of({
            "aria-label": label,
            ...(testId ? { "data-testid": testId } : {}),
          }),
          placeholder ? placeholderText(placeholder) : [],
          languageOf(language),
          EditorView.updateListener.of((update) => {
            if (update.docChanged) changed.current?.(update.state.doc.toString());
          }),
        ],
      }),
    });
    view.current = editor;
    return () => {
      editor.destroy();
      view.current = null;
    };
    // The editor is made once per language; its text follows `value` below.
  }, [language, readOnly, label]);

  // A value set from outside (generated test data, a reload) replaces the text.
  useEffect(() => {
    const editor = view.current;
    if (editor && editor.state.doc.toString() !== value) {
      editor.dispatch({ changes: { from: 0, to: editor.state.doc.length, insert: value } });
    }
  }, [value]);

  return <div ref={host} className={invalid ? "code-editor code-editor-invalid" : "code-editor"} />;
}
