import { api, errorMessage } from "../api/client";
import { startSession } from "./session";

/**
 * Exchanges an API key for a token at once (DESIGN.md §9) and reads what the key may do; the key
 * itself is kept nowhere.
 */
export async function signIn(key: string): Promise<void> {
  const authorization = `Bearer ${key.trim()}`;
  const issued = await api.POST("/api/v1/token/issue", { body: {}, headers: { authorization } });
  if (!issued.data) {
    throw new Error(
      issued.response.status === 401
        ? "This key was refused: check that it is a current API key of the project."
        : errorMessage(issued.error),
    );
  }
  const { token, expires_at } = issued.data;
  const account = await api.GET("/api/v1/account", {
    headers: { authorization: `Bearer ${token}` },
  });
  if (!account.data) throw new Error(errorMessage(account.error));
  startSession({
    token,
    expiresAt: expires_at,
    role: account.data.key.role,
    project: account.data.project.name,
    keyName: account.data.key.name,
  });
}

/**
 * A key given in the URL's fragment (`/#key=sk-…`, the link `npm start` prints: a fragment is
 * never sent to a server), taken out of the address bar and history at once.
 */
export function takeKeyFromFragment(): string | undefined {
  const match = /^#key=([^&]+)/.exec(window.location.hash);
  if (!match) return undefined;
  window.history.replaceState(
    window.history.state,
    "",
    window.location.pathname + window.location.search,
  );
  return decodeURIComponent(match[1] ?? "");
}
