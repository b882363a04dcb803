// The `lucene` package (a PEG.js parser of Lucene's query syntax) ships no types: the parts of its
// syntax tree that the query compiler reads.
declare module "lucene" {
  interface Position {
    offset: number;
    line: number;
    column: number;
  }
  interface Location {
    start: Position;
    end: Position;
  }
  /** A term, a phrase (quoted) or a regular expression, on a field or `<implicit>`. */
  export interface TermNode {
    field: string;
    fieldLocation: Location | null;
    term: string;
    quoted: boolean;
    regex: boolean;
    termLocation: Location | null;
    similarity?: number | null;
    proximity?: number | null;
    boost?: number | null;
    /** `-`, `+` or `!` written before the term. */
    prefix?: string | null;
  }
  /** `[min TO max]`, `{min TO max}` or mixed; `*` is an open bound. */
  export interface RangeNode {
    field: string;
    fieldLocation: Location | null;
    term_min: string;
    term_max: string;
    inclusive: "both" | "left" | "right" | "none";
  }
  /** An expression: `left`, and when there is one, an operator and `right`. */
  export interface Node {
    left: Node | TermNode | RangeNode;
    operator?: string;
    right?: Node | TermNode | RangeNode;
    /** `NOT` at the start of the query, applying to `left`. */
    start?: string;
    parenthesized?: boolean;
    /** A field before a group: `field:(a OR b)`. */
    field?: string;
    fieldLocation?: Location | null;
  }
  export function parse(query: string): Node;
  export const term: { escape(s: string): string; unescape(s: string): string };
}
