import { api } from "../api/client";
import { unwrap } from "../ui/load";
import type { EnvironmentOption } from "./draft-editor";

/** The project's environments, for the draft's settings. */
export async function listEnvironments(): Promise<EnvironmentOption[]> {
  return unwrap(await api.GET("/api/v1/environments")).map(({ id, name, provider }) => ({
    id,
    name,
    provider,
  }));
}
