import { apiKeyRoleName, type Account, type ApiKey, type Project } from "@pies/proto/catalog";
import { iso } from "./common.js";

export const accountJson = (a: Account) => ({
  id: a.id,
  name: a.name,
  created_at: iso(a.createdAt),
});

export const projectJson = (p: Project) => ({
  id: p.id,
  name: p.name,
  account: p.accountId,
  retention_days: p.retentionDays,
  created_at: iso(p.createdAt),
});

export const apiKeyJson = (k: ApiKey) => ({
  id: k.id,
  name: k.name,
  hint: k.keyHint,
  role: apiKeyRoleName(k.role),
  project: k.projectId,
  account: k.accountId,
  created_at: iso(k.createdAt),
});
