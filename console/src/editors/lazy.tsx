import { Skeleton } from "@mantine/core";
import { lazy, Suspense } from "react";
import type { CodeEditorProps } from "./code-editor";
import type { DiffViewProps } from "./diff-view";

// CodeMirror is loaded with the first editor or diff a page shows, never with the console itself.
const CodeEditorModule = lazy(() => import("./code-editor"));
const DiffViewModule = lazy(() => import("./diff-view"));

/** A CodeMirror editor, loaded on first use. */
export function CodeEditor(props: CodeEditorProps) {
  return (
    <Suspense fallback={<Skeleton height={96} aria-label="Loading the editor" />}>
      <CodeEditorModule {...props} />
    </Suspense>
  );
}

/** A one-column diff of two texts, loaded on first use. */
export function DiffView(props: DiffViewProps) {
  return (
    <Suspense fallback={<Skeleton height={96} aria-label="Loading the difference" />}>
      <DiffViewModule {...props} />
    </Suspense>
  );
}
