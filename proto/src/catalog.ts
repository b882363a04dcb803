import {
  ApiKeyRole,
  ApiKeyRoleSchema,
  InteractionStatusSchema,
  VisibilitySchema,
} from "../gen/pies/catalog/v1/resources_pb.js";
import { enumNames } from "./enum-names.js";
export * from "../gen/pies/catalog/v1/resources_pb.js";
export * from "../gen/pies/catalog/v1/catalog_service_pb.js";

/** Interaction, version and template statuses by name (`draft`, `published`, `archived`). */
export const interactionStatuses = enumNames(InteractionStatusSchema);

/** Visibilities of a published version by name (`private`, `public`). */
export const visibilities = enumNames(VisibilitySchema);

/** Key roles by name (`admin`, `member`). */
export const apiKeyRoles = enumNames(ApiKeyRoleSchema);

/** A role's name as stored and shown (`admin`, `member`); "" for the unspecified role. */
export const apiKeyRoleName = (role: ApiKeyRole): string => apiKeyRoles.name(role) ?? "";

/** The role of a name, in any case (`admin`, `Member`); undefined for any other. */
export const apiKeyRoleFromName = (name: string): ApiKeyRole | undefined =>
  apiKeyRoles.value(name.toLowerCase());

/** The names of the roles a key can have. */
export const apiKeyRoleNames: readonly string[] = apiKeyRoles.names;
export type { EnumNames } from "./enum-names.js";
