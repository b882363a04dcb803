import { useSyncExternalStore } from "react";

/**
 * Who is signed in: a token from `POST /api/v1/token/issue` (never the API key, which is dropped
 * as soon as it is exchanged), kept in sessionStorage so that a reload keeps the tab signed in,
 * and what `GET /api/v1/account` says of the key.
 */
export interface Session {
  token: string;
  expiresAt: string;
  role: string;
  project: string;
  keyName: string;
}

const STORAGE_KEY = "pies.session";

interface State {
  session: Session | null;
  /** Why the user was sent back to sign in. */
  notice: string | null;
}

let state: State = { session: read(), notice: null };
const listeners = new Set<() => void>();
let expiry: ReturnType<typeof setTimeout> | undefined;

function read(): Session | null {
  try {
    const text = sessionStorage.getItem(STORAGE_KEY);
    const session = text ? (JSON.parse(text) as Session) : null;
    return session && Date.parse(session.expiresAt) > Date.now() ? session : null;
  } catch {
    return null;
  }
}

function set(next: State) {
  state = next;
  if (next.session) sessionStorage.setItem(STORAGE_KEY, JSON.stringify(next.session));
  else sessionStorage.removeItem(STORAGE_KEY);
  clearTimeout(expiry);
  if (next.session) {
    // Past its expiry a token is refused: go back to sign-in before a request finds out.
    const left = Date.parse(next.session.expiresAt) - Date.now();
    expiry = setTimeout(
      () => endSession("Your session has expired. Sign in again."),
      Math.min(Math.max(left, 0), 2 ** 31 - 1),
    );
  }
  for (const listener of listeners) listener();
}

function subscribe(listener: () => void) {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

export const useAuth = () => useSyncExternalStore(subscribe, () => state);

export const currentToken = () => state.session?.token;

export function startSession(session: Session) {
  set({ session, notice: null });
}

/** Back to sign-in; `notice` says why (none: the user signed out). */
export function endSession(notice: string | null = null) {
  if (!state.session && state.notice === notice) return;
  set({ session: null, notice });
}

// Arms the expiry timer of a session read from sessionStorage.
if (state.session) set(state);
