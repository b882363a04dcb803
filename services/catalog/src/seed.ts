import type { Client } from "@connectrpc/connect";
import { answered } from "@pies/common";
import { ApiKeyRole, type CatalogService } from "@pies/proto/catalog";

/** What a seed made: ids, and the admin key's secret (shown once, never stored in clear). */
export interface Seeded {
  accountId: string;
  projectId: string;
  environmentId: string;
  key: string;
}

/**
 * A ready-to-use tenant, through the catalog's API: an account with a first project, a `test`
 * environment on the built-in test provider, and an admin key. The CLI's `bootstrap`, the embedded
 * mode's first start and the tests' pies all start from this.
 */
export async function seedAccount(
  catalog: Client<typeof CatalogService>,
  names: { account: string; project?: string; key: string },
): Promise<Seeded> {
  const created = await catalog.createAccount({
    name: names.account,
    projectName: names.project ?? "",
  });
  const account = answered(created.account, "account");
  const project = answered(created.project, "project");
  const { environment } = await catalog.createEnvironment({
    projectId: project.id,
    environment: { name: "test", provider: "test", defaultModel: "test" },
  });
  const { secret } = await catalog.createApiKey({
    projectId: project.id,
    name: names.key,
    role: ApiKeyRole.ADMIN,
  });
  return {
    accountId: account.id,
    projectId: project.id,
    environmentId: answered(environment, "environment").id,
    key: secret,
  };
}
