import { ApiKeyRole, ApiKeyRoleSchema } from "../gen/pies/catalog/v1/resources_pb.js";
export * from "../gen/pies/catalog/v1/resources_pb.js";
export * from "../gen/pies/catalog/v1/catalog_service_pb.js";

const rolePrefix = "API_KEY_ROLE_";

/** A role's name as stored and shown (`admin`, `member`), from the enum's descriptor. */
export function apiKeyRoleName(role: ApiKeyRole): string {
  const value = ApiKeyRoleSchema.values.find((v) => v.number === role);
  return value && role !== ApiKeyRole.UNSPECIFIED
    ? value.name.slice(rolePrefix.length).toLowerCase()
    : "";
}

/** The role of a name (`admin`, `member`); undefined for any other. */
export function apiKeyRoleFromName(name: string): ApiKeyRole | undefined {
  const value = ApiKeyRoleSchema.values.find(
    (v) => v.number !== ApiKeyRole.UNSPECIFIED && v.name === rolePrefix + name.toUpperCase(),
  );
  return value?.number as ApiKeyRole | undefined;
}

/** The names of the roles a key can have. */
export const apiKeyRoleNames: readonly string[] = ApiKeyRoleSchema.values
  .filter((v) => v.number !== ApiKeyRole.UNSPECIFIED)
  .map((v) => v.name.slice(rolePrefix.length).toLowerCase());
