import type { ServiceImpl } from "@connectrpc/connect";
import { Code, ConnectError } from "@connectrpc/connect";
import { invalid, newId, notFound, requireProject } from "@pies/common";
import type { Kysely, Selectable } from "kysely";
import {
  ApiKeyRole,
  apiKeyRoleFromName,
  apiKeyRoleName,
  type CatalogService,
} from "@pies/proto/catalog";
import type { CatalogDeps } from "./context.js";
import { accountToProto, apiKeyToProto, projectToProto } from "./mappers.js";
import { hashApiKey, newApiKeySecret } from "./secrets.js";
import type { CatalogDatabase, ProjectsTable } from "./tables.js";

/** Inserts a key for a project; the secret is returned here and never again. */
async function insertApiKey(
  db: Kysely<CatalogDatabase>,
  project: Selectable<ProjectsTable>,
  name: string,
  role: ApiKeyRole,
) {
  const secret = newApiKeySecret();
  const row = await db
    .insertInto("catalog.api_keys")
    .values({
      id: newId(),
      project_id: project.id,
      account_id: project.account_id,
      name,
      role: apiKeyRoleName(role),
      key_hash: hashApiKey(secret),
      key_hint: secret.slice(0, 7),
      revoked_at: null,
    })
    .returningAll()
    .executeTakeFirstOrThrow();
  return { apiKey: apiKeyToProto(row), secret };
}

/** The longest retention a project may set, in days (a hundred years: "for ever" is 0). */
export const MAX_RETENTION_DAYS = 36_500;

function checkRetention(days: number) {
  if (!Number.isInteger(days) || days < 0 || days > MAX_RETENTION_DAYS) {
    throw invalid(
      `retention_days: must be 0 to ${MAX_RETENTION_DAYS} (0: the deployment's retention)`,
    );
  }
}

export function tenancyHandlers({ db }: CatalogDeps): Partial<ServiceImpl<typeof CatalogService>> {
  return {
    async createAccount(req) {
      if (!req.name) throw invalid("name is required");
      return db.transaction().execute(async (tx) => {
        const account = await tx
          .insertInto("catalog.accounts")
          .values({ id: newId(), name: req.name })
          .returningAll()
          .executeTakeFirstOrThrow();
        const project = await tx
          .insertInto("catalog.projects")
          .values({ id: newId(), account_id: account.id, name: req.projectName || "default" })
          .returningAll()
          .executeTakeFirstOrThrow();
        return { account: accountToProto(account), project: projectToProto(project) };
      });
    },

    async getAccount(req) {
      const row = await db
        .selectFrom("catalog.accounts")
        .selectAll()
        .where("id", "=", req.accountId)
        .executeTakeFirst();
      if (!row) throw notFound("account", req.accountId);
      return { account: accountToProto(row) };
    },

    async createProject(req) {
      if (!req.name) throw invalid("name is required");
      checkRetention(req.retentionDays);
      // A project is reachable only through a key of its own: it comes with an admin key.
      return db.transaction().execute(async (tx) => {
        const account = await tx
          .selectFrom("catalog.accounts")
          .select("id")
          .where("id", "=", req.accountId)
          .executeTakeFirst();
        if (!account) throw notFound("account", req.accountId);
        const row = await tx
          .insertInto("catalog.projects")
          .values({
            id: newId(),
            account_id: account.id,
            name: req.name,
            retention_days: req.retentionDays,
          })
          .returningAll()
          .executeTakeFirstOrThrow();
        const { apiKey, secret } = await insertApiKey(tx, row, "default", ApiKeyRole.ADMIN);
        return { project: projectToProto(row), apiKey, secret };
      });
    },

    async listProjects(req) {
      const rows = await db
        .selectFrom("catalog.projects")
        .selectAll()
        .where("account_id", "=", req.accountId)
        .orderBy("created_at")
        .execute();
      return { projects: rows.map(projectToProto) };
    },

    async updateProject(req) {
      if (req.name !== undefined && !req.name) throw invalid("name: must not be empty");
      if (req.retentionDays !== undefined) checkRetention(req.retentionDays);
      const change = {
        ...(req.name !== undefined ? { name: req.name } : {}),
        ...(req.retentionDays !== undefined ? { retention_days: req.retentionDays } : {}),
      };
      const id = requireProject(req.projectId);
      // Another account's project is as unknown as a project that does not exist.
      const row =
        Object.keys(change).length > 0
          ? await db
              .updateTable("catalog.projects")
              .set(change)
              .where("id", "=", id)
              .where("account_id", "=", req.accountId)
              .returningAll()
              .executeTakeFirst()
          : await db
              .selectFrom("catalog.projects")
              .selectAll()
              .where("id", "=", id)
              .where("account_id", "=", req.accountId)
              .executeTakeFirst();
      if (!row) throw notFound("project", req.projectId);
      return { project: projectToProto(row) };
    },

    async listProjectRetention() {
      const rows = await db
        .selectFrom("catalog.projects")
        .select(["id", "retention_days"])
        .where("retention_days", ">", 0)
        .execute();
      return {
        projects: rows.map((r) => ({ projectId: r.id, retentionDays: r.retention_days })),
      };
    },

    async createApiKey(req) {
      const project = await db
        .selectFrom("catalog.projects")
        .selectAll()
        .where("id", "=", requireProject(req.projectId))
        .executeTakeFirst();
      // Another account's project is as unknown as a project that does not exist.
      if (!project || (req.accountId && project.account_id !== req.accountId))
        throw notFound("project", req.projectId);
      const role = req.role === ApiKeyRole.UNSPECIFIED ? ApiKeyRole.MEMBER : req.role;
      if (!apiKeyRoleName(role)) throw invalid(`role ${req.role} is not a role`);
      return insertApiKey(db, project, req.name || "default", role);
    },

    async listApiKeys(req) {
      const rows = await db
        .selectFrom("catalog.api_keys")
        .selectAll()
        .where("project_id", "=", requireProject(req.projectId))
        .where("revoked_at", "is", null)
        .orderBy("created_at")
        .execute();
      return { apiKeys: rows.map(apiKeyToProto) };
    },

    async deleteApiKey(req) {
      const result = await db
        .updateTable("catalog.api_keys")
        .set({ revoked_at: new Date() })
        .where("project_id", "=", requireProject(req.projectId))
        .where("id", "=", req.id)
        .where("revoked_at", "is", null)
        .executeTakeFirst();
      if (result.numUpdatedRows === 0n) throw notFound("api key", req.id);
      return {};
    },

    async verifyApiKey(req) {
      const unauthenticated = new ConnectError("invalid API key", Code.Unauthenticated);
      if (!req.secret.startsWith("sk-")) throw unauthenticated;
      const row = await db
        .selectFrom("catalog.api_keys as k")
        .innerJoin("catalog.projects as p", "p.id", "k.project_id")
        .innerJoin("catalog.accounts as a", "a.id", "k.account_id")
        .select([
          "k.id",
          "k.name",
          "k.role",
          "k.project_id",
          "k.account_id",
          "p.name as project_name",
          "a.name as account_name",
        ])
        .where("k.key_hash", "=", hashApiKey(req.secret))
        .where("k.revoked_at", "is", null)
        .executeTakeFirst();
      if (!row) throw unauthenticated;
      return {
        principal: {
          accountId: row.account_id,
          projectId: row.project_id,
          apiKeyId: row.id,
          apiKeyName: row.name,
          accountName: row.account_name,
          projectName: row.project_name,
          role: apiKeyRoleFromName(row.role),
        },
      };
    },
  };
}
