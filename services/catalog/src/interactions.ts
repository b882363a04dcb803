import type { ServiceImpl } from "@connectrpc/connect";
import { Code, ConnectError } from "@connectrpc/connect";
import { sql, type ExpressionBuilder, type Insertable, type Kysely } from "kysely";
import {
  checkGenerationSettings,
  INT32_MAX,
  invalid,
  newId,
  notFound,
  PAGE_SIZE,
  pageSize,
  requireProject,
  routingOf,
  VIRTUAL_PROVIDER,
} from "@pies/common";
import { hasAnyTag } from "@pies/common/db";
import {
  InteractionStatus,
  Visibility,
  visibilities,
  type CatalogService,
  type Environment,
  type Interaction,
  type InteractionInput,
  type PromptSegment,
} from "@pies/proto/catalog";
import { RunStore, runStores } from "@pies/proto/runs";
import type { CatalogDeps } from "./context.js";
import { findEnvironment } from "./environments.js";
import {
  cachePolicyToJson,
  environmentToProto,
  interactionToProto,
  statusName,
  storeName,
} from "./mappers.js";
import { payloadOf } from "./payloads.js";
import { insertPrompt } from "./prompts.js";
import { checkJsonSchema } from "./schemas.js";
import type {
  CatalogDatabase,
  EnvironmentRow,
  InteractionRow,
  PromptRow,
  PromptsTable,
  StoredSegment,
} from "./tables.js";

const SEGMENT_TYPES = ["template", "chat"];

type InteractionsOnly = Pick<CatalogDatabase, "catalog.interactions">;

/** Loads the templates the segments refer to, in one query. */
async function templatesOf(
  db: Kysely<CatalogDatabase>,
  projectId: string,
  rows: InteractionRow[],
): Promise<Map<string, PromptRow>> {
  const ids = [
    ...new Set(rows.flatMap((r) => r.prompts.filter((s) => !s.template).map((s) => s.template_id))),
  ].filter(Boolean);
  if (ids.length === 0) return new Map();
  const templates = await db
    .selectFrom("catalog.prompts")
    .selectAll()
    .where("project_id", "=", projectId)
    .where("id", "in", ids)
    .execute();
  return new Map(templates.map((t) => [t.id, t]));
}

/**
 * The segments as stored. A template given inline without an id is inserted as a new template
 * (what GET /interactions/:id shows can be sent back); one with an id refers to that template.
 * Every template referred to must be in the project: it is read FOR SHARE, so a concurrent
 * delete of it waits for this transaction and then sees the interaction that uses it.
 */
async function storedSegments(
  tx: Kysely<CatalogDatabase>,
  projectId: string,
  prompts: PromptSegment[],
): Promise<StoredSegment[]> {
  const segments: StoredSegment[] = [];
  const referred = new Set<string>();
  for (const [i, p] of prompts.entries()) {
    const type = p.type || "template";
    if (!SEGMENT_TYPES.includes(type))
      throw invalid(`prompts.${i}.type: segment type ${type} is not supported`);
    if (type === "chat" && !p.chatPath)
      throw invalid(`prompts.${i}: a chat segment needs chat_path`);
    let templateId = "";
    if (type === "template") {
      templateId = p.templateId || p.template?.id || "";
      if (!templateId && p.template) {
        const t = p.template;
        const fields = {
          name: t.name || undefined,
          role: t.role || undefined,
          contentType: t.contentType || undefined,
          content: t.content,
          testData: payloadOf("test_data", t.testDataJson),
          inputSchema: payloadOf("inputSchema", t.inputSchemaJson),
        };
        templateId = (
          await insertPrompt(tx, projectId, fields).catch((err: unknown) => {
            // Named as the body names it: which segment's template is wrong.
            if (err instanceof ConnectError && err.code === Code.InvalidArgument)
              throw invalid(`prompts.${i}.template: ${err.rawMessage}`);
            throw err;
          })
        ).id;
      } else if (!templateId) {
        throw invalid(`prompts.${i}: a template segment needs template`);
      } else {
        referred.add(templateId);
      }
    }
    segments.push({
      id: p.id || newId(),
      type,
      template_id: templateId,
      ...(type === "chat" ? { chat_path: p.chatPath } : {}),
    });
  }
  if (referred.size > 0) {
    const found = await tx
      .selectFrom("catalog.prompts")
      .select("id")
      .where("project_id", "=", projectId)
      .where("id", "in", [...referred])
      .forShare()
      .execute();
    const missing = [...referred].filter((id) => !found.some((f) => f.id === id));
    // As everywhere: an id of another project reads as unknown (404), never as "exists".
    if (missing.length > 0) throw notFound("prompt template", missing.join(", "));
  }
  return segments;
}

/** The environment must be in the project (read FOR SHARE, as templates are). */
async function checkEnvironment(tx: Kysely<CatalogDatabase>, projectId: string, id: string) {
  const env = await tx
    .selectFrom("catalog.environments")
    .select("id")
    .where("project_id", "=", projectId)
    .where("id", "=", id)
    .forShare()
    .executeTakeFirst();
  if (!env) throw notFound("environment", id);
}

/**
 * What every write of an interaction checks before touching the database; its JSON payloads, read
 * (payloadOf: undefined keeps the stored value, null clears it).
 */
function checkInput(input: InteractionInput) {
  // `@` separates a name from its version selector (`Name@3`): a name holding one could not be run.
  if (input.name?.includes("@")) {
    throw invalid("name must not contain @ (it separates a name from its version, as in Name@3)");
  }
  // Only publishing makes a published version: a draft is draft or archived.
  if (input.status === InteractionStatus.PUBLISHED) {
    throw invalid("status: a draft is draft or archived; publish it to make a published version");
  }
  checkGenerationSettings(input);
  const resultSchema = payloadOf("resultSchema", input.resultSchemaJson);
  checkJsonSchema("resultSchema", resultSchema ?? undefined);
  if (
    input.cachePolicy?.type &&
    !["cache", "no_cache", "cache_and_refresh"].includes(input.cachePolicy.type)
  )
    throw invalid("cache_policy.type must be one of cache, no_cache, cache_and_refresh");
  if (
    input.store !== undefined &&
    input.store !== RunStore.UNSPECIFIED &&
    runStores.name(input.store) === undefined
  )
    throw invalid(`store must be one of ${runStores.names.join(", ")}`);
  return { testData: payloadOf("test_data", input.testDataJson), resultSchema };
}

/** An interaction of the project, locked for this transaction, or NOT_FOUND. */
async function lockInteraction(tx: Kysely<CatalogDatabase>, projectId: string, id: string) {
  const row = await tx
    .selectFrom("catalog.interactions")
    .selectAll()
    .where("project_id", "=", projectId)
    .where("id", "=", id)
    .forUpdate()
    .executeTakeFirst();
  if (!row) throw notFound("interaction", id);
  return row;
}

/** FAILED_PRECONDITION for a write that only a draft takes. */
function immutable(row: InteractionRow, what: string) {
  return new ConnectError(
    `interaction ${row.id} is version ${row.version} of ${row.parent_id}: a published version is immutable; ${what} ${row.parent_id} instead`,
    Code.FailedPrecondition,
  );
}

/** The version selector of `Name@3`, `Name@latest`, `Name@draft` or a bare `Name`. */
function parseSelector(ref: string): { name: string; selector: string } {
  const at = ref.lastIndexOf("@");
  return at > 0
    ? { name: ref.slice(0, at), selector: ref.slice(at + 1) }
    : { name: ref, selector: "" };
}

/**
 * The interactions (drafts) named `name` and their versions. A version is found by the current
 * name of its interaction, so a renamed interaction takes its versions along, while each version
 * keeps the name it was published under (a snapshot). By index: the name, then the parents.
 */
function namedInteraction(
  eb: ExpressionBuilder<InteractionsOnly, "catalog.interactions">,
  projectId: string,
  name: string,
) {
  const drafts = eb
    .selectFrom("catalog.interactions as d")
    .select("d.id")
    .where("d.project_id", "=", projectId)
    .where("d.name", "=", name)
    .where("d.parent_id", "is", null);
  return eb.or([
    eb.and([eb("parent_id", "is", null), eb("name", "=", name)]),
    eb("parent_id", "in", drafts),
  ]);
}

/**
 * `Name`, `Name@latest`, `Name@draft`, `Name@3`: the draft named so is found first (the most
 * recently updated one when several share the name), then the selector picks among that draft and
 * its versions, so that every selector of one name speaks of the same interaction.
 */
async function findByName(db: Kysely<CatalogDatabase>, projectId: string, ref: string) {
  const { name, selector } = parseSelector(ref);
  const draft = db
    .selectFrom("catalog.interactions")
    .select("id")
    .where("project_id", "=", projectId)
    .where("name", "=", name)
    .where("parent_id", "is", null)
    .orderBy("updated_at", "desc")
    .limit(1);
  let query = db
    .selectFrom("catalog.interactions")
    .selectAll()
    .where("project_id", "=", projectId)
    .where((eb) => eb.or([eb("id", "=", draft), eb("parent_id", "=", draft)]));
  if (selector === "draft") {
    query = query.where("parent_id", "is", null);
  } else if (selector === "latest") {
    query = query.where("latest", "=", true);
  } else if (selector) {
    // Versions are `integer` columns: a larger number is no version, and PostgreSQL refuses it.
    const version = Number(selector);
    if (!/^[0-9]+$/.test(selector) || version < 1 || version > INT32_MAX) {
      throw invalid(
        `version selector ${selector} must be latest, draft or a number from 1 to ${INT32_MAX}`,
      );
    }
    query = query.where("version", "=", version);
  } else {
    // A bare name runs the latest published version, or the draft when nothing is published.
    query = query.orderBy("latest", "desc").orderBy("version", "desc");
  }
  return query.orderBy("updated_at", "desc").limit(1).executeTakeFirst();
}

/**
 * The segments of a fork: the source's templates by id (each must still be the project's, read FOR
 * SHARE as any reference is), or with `copy` new templates copied from them (a version's from its
 * snapshot, as published). The templates a draft names are loaded in one query.
 */
async function forkedSegments(
  tx: Kysely<CatalogDatabase>,
  projectId: string,
  source: InteractionRow,
  copy: boolean,
): Promise<StoredSegment[]> {
  const referred = [
    ...new Set(source.prompts.filter((s) => s.type === "template").map((s) => s.template_id)),
  ];
  const live =
    referred.length === 0
      ? new Map<string, PromptRow>()
      : new Map(
          (
            await tx
              .selectFrom("catalog.prompts")
              .selectAll()
              .where("project_id", "=", projectId)
              .where("id", "in", referred)
              .forShare()
              .execute()
          ).map((t) => [t.id, t]),
        );
  const segments: StoredSegment[] = [];
  // The copies, inserted together (they were valid templates: nothing to check again).
  const copies: Insertable<PromptsTable>[] = [];
  for (const segment of source.prompts) {
    const fork: StoredSegment = {
      id: newId(),
      type: segment.type,
      template_id: segment.template_id,
      ...(segment.chat_path !== undefined ? { chat_path: segment.chat_path } : {}),
    };
    if (segment.type === "template") {
      const template = copy ? (segment.template ?? live.get(segment.template_id)) : undefined;
      if (template) {
        fork.template_id = newId();
        copies.push({
          id: fork.template_id,
          project_id: projectId,
          name: template.name,
          role: template.role,
          content_type: template.content_type,
          content: template.content,
          test_data: JSON.stringify(template.test_data),
          input_schema: JSON.stringify(template.input_schema),
        });
      } else if (!live.has(segment.template_id)) {
        throw new ConnectError(
          `prompt template ${segment.template_id} of interaction ${source.id} no longer exists` +
            (source.parent_id && !copy ? "; fork with forkPrompts to copy the version's own" : ""),
          Code.FailedPrecondition,
        );
      }
    }
    segments.push(fork);
  }
  if (copies.length > 0) await tx.insertInto("catalog.prompts").values(copies).execute();
  return segments;
}

export function interactionHandlers({
  db,
  secrets,
}: CatalogDeps): Partial<ServiceImpl<typeof CatalogService>> {
  const apiKeyOf = (env: EnvironmentRow) => (env.api_key_enc ? secrets.open(env.api_key_enc) : "");
  /**
   * An environment as an execution needs it: with its key, and for a virtual one the environments
   * its entries name, each with its key, in one query (an entry whose environment has gone is the
   * executor's to fail over from).
   */
  const resolvedEnvironment = async (projectId: string, env: EnvironmentRow) => {
    const answer = {
      environment: environmentToProto(env),
      apiKey: apiKeyOf(env),
      routes: [] as { environment: Environment; apiKey: string }[],
    };
    if (env.provider !== VIRTUAL_PROVIDER) return answer;
    const routing = routingOf(env.config);
    if ("invalid" in routing) {
      throw new ConnectError(`environment ${env.id}: ${routing.invalid}`, Code.FailedPrecondition);
    }
    const rows = await db
      .selectFrom("catalog.environments")
      .selectAll()
      .where("project_id", "=", projectId)
      .where("id", "in", [...new Set(routing.entries.map((e) => e.environmentId))])
      .execute();
    answer.routes = rows.map((row) => ({
      environment: environmentToProto(row),
      apiKey: apiKeyOf(row),
    }));
    return answer;
  };
  return {
    async createInteraction(req) {
      const projectId = requireProject(req.projectId);
      const input = req.interaction;
      const name = input?.name;
      if (!input || !name) throw invalid("name is required");
      const payloads = checkInput(input);
      const row = await db.transaction().execute(async (tx) => {
        const segments = await storedSegments(tx, projectId, input.prompts);
        if (input.environmentId) await checkEnvironment(tx, projectId, input.environmentId);
        return tx
          .insertInto("catalog.interactions")
          .values({
            id: newId(),
            project_id: projectId,
            name,
            description: input.description ?? "",
            status: statusName(input.status ?? InteractionStatus.DRAFT),
            test_data: JSON.stringify(payloads.testData ?? null),
            result_schema: JSON.stringify(payloads.resultSchema ?? null),
            cache_policy: JSON.stringify(cachePolicyToJson(input.cachePolicy)),
            model: input.model ?? "",
            temperature: input.temperature ?? null,
            max_tokens: input.maxTokens ?? null,
            environment_id: input.environmentId || null,
            prompts: JSON.stringify(segments),
            tags: input.tags,
            parent_id: null,
            formatter: input.formatter ?? "",
            store: storeName(input.store ?? RunStore.FULL),
          })
          .returningAll()
          .executeTakeFirstOrThrow();
      });
      return { interaction: interactionToProto(row) };
    },

    async getInteraction(req) {
      const projectId = requireProject(req.projectId);
      const row = await db
        .selectFrom("catalog.interactions")
        .selectAll()
        .where("project_id", "=", projectId)
        .where("id", "=", req.id)
        .executeTakeFirst();
      if (!row) throw notFound("interaction", req.id);
      const templates = req.expandTemplates ? await templatesOf(db, projectId, [row]) : undefined;
      return { interaction: interactionToProto(row, templates) };
    },

    async listInteractions(req) {
      const projectId = requireProject(req.projectId);
      let query = db
        .selectFrom("catalog.interactions")
        .selectAll()
        .where("project_id", "=", projectId);
      if (req.status !== InteractionStatus.UNSPECIFIED) {
        query = query.where("status", "=", statusName(req.status));
      }
      if (req.name) query = query.where((eb) => namedInteraction(eb, projectId, req.name));
      if (req.version !== undefined) query = query.where("version", "=", req.version);
      if (req.tags.length > 0) query = query.where(hasAnyTag(req.tags));
      // Which rows the filters select among (SPEC.md, GET /interactions): a status says it (draft
      // and archived are drafts', published is the versions'); else `version` and `tags` select
      // versions (the tags a version was published with), `name` the named interaction's draft
      // and its versions, and no filter the drafts.
      if (req.status === InteractionStatus.UNSPECIFIED) {
        if (req.version !== undefined || req.tags.length > 0)
          query = query.where("parent_id", "is not", null);
        else if (!req.name) query = query.where("parent_id", "is", null);
      }
      const rows = await query
        .orderBy("updated_at", "desc")
        .orderBy("id", "desc")
        .limit(pageSize(req.limit))
        .offset(Math.max(0, req.offset))
        .execute();
      return { interactions: rows.map((row) => interactionToProto(row)) };
    },

    async updateInteraction(req) {
      const projectId = requireProject(req.projectId);
      const input = req.interaction;
      if (!input) throw invalid("interaction is required");
      if (input.name === "") throw invalid("name must not be empty");
      const payloads = checkInput(input);
      const row = await db.transaction().execute(async (tx) => {
        const current = await lockInteraction(tx, projectId, req.id);
        if (current.parent_id) throw immutable(current, "update");
        const segments = input.setPrompts
          ? await storedSegments(tx, projectId, input.prompts)
          : undefined;
        if (input.environmentId) await checkEnvironment(tx, projectId, input.environmentId);
        return tx
          .updateTable("catalog.interactions")
          .set({
            ...(input.name !== undefined ? { name: input.name } : {}),
            ...(input.description !== undefined ? { description: input.description } : {}),
            ...(input.status !== undefined ? { status: statusName(input.status) } : {}),
            ...(payloads.testData !== undefined
              ? { test_data: JSON.stringify(payloads.testData) }
              : {}),
            ...(payloads.resultSchema !== undefined
              ? { result_schema: JSON.stringify(payloads.resultSchema) }
              : {}),
            ...(input.cachePolicy
              ? {
                  cache_policy: JSON.stringify(
                    input.cachePolicy.type ? cachePolicyToJson(input.cachePolicy) : null,
                  ),
                }
              : {}),
            ...(input.model !== undefined ? { model: input.model } : {}),
            ...(input.temperature !== undefined ? { temperature: input.temperature } : {}),
            ...(input.maxTokens !== undefined ? { max_tokens: input.maxTokens } : {}),
            ...(input.environmentId !== undefined
              ? { environment_id: input.environmentId || null }
              : {}),
            ...(segments ? { prompts: JSON.stringify(segments) } : {}),
            ...(input.setTags ? { tags: input.tags } : {}),
            ...(input.formatter !== undefined ? { formatter: input.formatter } : {}),
            ...(input.store !== undefined ? { store: storeName(input.store) } : {}),
            updated_at: new Date(),
          })
          .where("id", "=", current.id)
          .returningAll()
          .executeTakeFirstOrThrow();
      });
      return { interaction: interactionToProto(row) };
    },

    async deleteInteraction(req) {
      const projectId = requireProject(req.projectId);
      await db.transaction().execute(async (tx) => {
        const row = await lockInteraction(tx, projectId, req.id);
        if (row.parent_id) throw immutable(row, "delete");
        // Its versions go with it: they are snapshots of it, reachable only through it.
        await tx
          .deleteFrom("catalog.interactions")
          .where("project_id", "=", projectId)
          .where((eb) => eb.or([eb("id", "=", row.id), eb("parent_id", "=", row.id)]))
          .execute();
      });
      return {};
    },

    async publishInteraction(req) {
      const projectId = requireProject(req.projectId);
      const visibility =
        req.visibility === Visibility.UNSPECIFIED ? Visibility.PRIVATE : req.visibility;
      const visibilityName = visibilities.name(visibility);
      if (!visibilityName) throw invalid(`visibility ${req.visibility} is not a visibility`);
      // READ COMMITTED whatever the server's default: the publish that waited on the lock must
      // read the number the previous one committed (a repeatable-read snapshot would not).
      const row = await db
        .transaction()
        .setIsolationLevel("read committed")
        .execute(async (tx) => {
          // The draft's row lock orders concurrent publishes of it: each reads the number the
          // previous one committed (the unique index on (parent_id, version) backs this up).
          const draft = await lockInteraction(tx, projectId, req.id);
          if (draft.parent_id) throw immutable(draft, "publish");
          const templates = await templatesOf(tx, projectId, [draft]);
          const prompts = draft.prompts.map((segment) => {
            if (segment.type !== "template") return segment;
            const template = templates.get(segment.template_id);
            if (!template)
              throw new ConnectError(
                `prompt template ${segment.template_id} of interaction ${draft.id} no longer exists`,
                Code.FailedPrecondition,
              );
            // The snapshot: a later edit of the template does not reach the version.
            return { ...segment, template };
          });
          const { last } = await tx
            .selectFrom("catalog.interactions")
            .select((eb) => eb.fn.max("version").as("last"))
            .where("parent_id", "=", draft.id)
            .executeTakeFirstOrThrow();
          await tx
            .updateTable("catalog.interactions")
            .set({ latest: false })
            .where("parent_id", "=", draft.id)
            .where("latest", "=", true)
            .execute();
          return tx
            .insertInto("catalog.interactions")
            .values({
              id: newId(),
              project_id: projectId,
              name: draft.name,
              description: draft.description,
              status: statusName(InteractionStatus.PUBLISHED),
              test_data: JSON.stringify(draft.test_data),
              result_schema: JSON.stringify(draft.result_schema),
              cache_policy: JSON.stringify(draft.cache_policy),
              model: draft.model,
              temperature: draft.temperature,
              max_tokens: draft.max_tokens,
              environment_id: draft.environment_id,
              prompts: JSON.stringify(prompts),
              // The version's own tags when given, else the interaction's.
              tags: req.tags.length > 0 ? req.tags : draft.tags,
              visibility: visibilityName,
              version: (last ?? 0) + 1,
              latest: true,
              parent_id: draft.id,
              formatter: draft.formatter,
              // The version's runs are stored as the draft's were when it was published.
              store: draft.store,
            })
            .returningAll()
            .executeTakeFirstOrThrow();
        });
      return { version: interactionToProto(row) };
    },

    async listInteractionVersions(req) {
      const projectId = requireProject(req.projectId);
      const row = await db
        .selectFrom("catalog.interactions")
        .select(["id", "parent_id"])
        .where("project_id", "=", projectId)
        .where("id", "=", req.id)
        .executeTakeFirst();
      if (!row) throw notFound("interaction", req.id);
      const rows = await db
        .selectFrom("catalog.interactions")
        .selectAll()
        .where("project_id", "=", projectId)
        .where("parent_id", "=", row.parent_id ?? row.id)
        .orderBy("version", "desc")
        .execute();
      return { versions: rows.map((r) => interactionToProto(r)) };
    },

    async forkInteraction(req) {
      const projectId = requireProject(req.projectId);
      const row = await db.transaction().execute(async (tx) => {
        // Read FOR SHARE: a concurrent delete of the source waits for the fork, or the fork
        // finds it gone.
        const source = await tx
          .selectFrom("catalog.interactions")
          .selectAll()
          .where("project_id", "=", projectId)
          .where("id", "=", req.id)
          .forShare()
          .executeTakeFirst();
        if (!source) throw notFound("interaction", req.id);
        const prompts = await forkedSegments(tx, projectId, source, req.forkPrompts);
        return tx
          .insertInto("catalog.interactions")
          .values({
            id: newId(),
            project_id: projectId,
            name: `${source.name} (fork)`,
            description: source.description,
            status: statusName(InteractionStatus.DRAFT),
            test_data: JSON.stringify(source.test_data),
            result_schema: JSON.stringify(source.result_schema),
            cache_policy: JSON.stringify(source.cache_policy),
            model: source.model,
            temperature: source.temperature,
            max_tokens: source.max_tokens,
            environment_id: source.environment_id,
            prompts: JSON.stringify(prompts),
            tags: req.keepTags ? source.tags : [],
            parent_id: null,
            forked_from: source.id,
            formatter: source.formatter,
            // A fork stores its runs as its source does until it is told otherwise.
            store: source.store,
          })
          .returningAll()
          .executeTakeFirstOrThrow();
      });
      return { interaction: interactionToProto(row) };
    },

    async listInteractionForks(req) {
      const projectId = requireProject(req.projectId);
      const source = await db
        .selectFrom("catalog.interactions")
        .select("id")
        .where("project_id", "=", projectId)
        .where("id", "=", req.id)
        .executeTakeFirst();
      if (!source) throw notFound("interaction", req.id);
      const rows = await db
        .selectFrom("catalog.interactions")
        .selectAll()
        .where("project_id", "=", projectId)
        .where("forked_from", "=", req.id)
        .orderBy("updated_at", "desc")
        .orderBy("id", "desc")
        .limit(PAGE_SIZE.max)
        .execute();
      return { interactions: rows.map((r) => interactionToProto(r)) };
    },

    async listInteractionTags(req) {
      const projectId = requireProject(req.projectId);
      // Two queries, together: every tag with its count (by unnesting each row's tags), and the
      // most recently updated rows that carry any, which name the interactions of each tag.
      const [counts, rows] = await Promise.all([
        sql<{ tag: string; count: number }>`
          select t.tag, count(distinct i.id)::int as count
          from catalog.interactions i cross join lateral unnest(i.tags) as t(tag)
          where i.project_id = ${projectId}
          group by t.tag
          order by t.tag`.execute(db),
        db
          .selectFrom("catalog.interactions")
          .selectAll()
          .where("project_id", "=", projectId)
          .where(sql<boolean>`cardinality(tags) > 0`)
          .orderBy("updated_at", "desc")
          .orderBy("id", "desc")
          .limit(PAGE_SIZE.max)
          .execute(),
      ]);
      const byTag = new Map<string, Interaction[]>();
      for (const row of rows) {
        const interaction = interactionToProto(row);
        for (const tag of new Set(row.tags)) {
          const list = byTag.get(tag);
          if (list) list.push(interaction);
          else byTag.set(tag, [interaction]);
        }
      }
      return {
        tags: counts.rows.map(({ tag, count }) => ({
          tag,
          count,
          interactions: byTag.get(tag) ?? [],
        })),
      };
    },

    async resolveInteraction(req) {
      const projectId = requireProject(req.projectId);
      if (!req.ref) throw invalid("ref is required");
      const row =
        (await db
          .selectFrom("catalog.interactions")
          .selectAll()
          .where("project_id", "=", projectId)
          .where("id", "=", req.ref)
          .executeTakeFirst()) ?? (await findByName(db, projectId, req.ref));
      if (!row) throw notFound("interaction", req.ref);
      const environmentId = req.environmentId || row.environment_id;
      const env = environmentId ? await findEnvironment(db, projectId, environmentId) : undefined;
      const [model, modelSource] = req.model
        ? [req.model, "config"]
        : row.model
          ? [row.model, "interaction"]
          : [env?.default_model ?? "", "environmentDefault"];
      return {
        interaction: interactionToProto(row),
        environment: env && environmentToProto(env),
        model,
        modelSource: model ? modelSource : "",
      };
    },

    async resolveExecution(req) {
      const projectId = requireProject(req.projectId);
      if (req.environmentOnly) {
        if (!req.environmentId) throw invalid("environment_id is required");
        const env = await findEnvironment(db, projectId, req.environmentId);
        return resolvedEnvironment(projectId, env);
      }
      const ref = req.interaction;
      if (!ref.case || !ref.value) throw invalid("interaction is required");
      const row =
        ref.case === "interactionId"
          ? await db
              .selectFrom("catalog.interactions")
              .selectAll()
              .where("project_id", "=", projectId)
              .where("id", "=", ref.value)
              .executeTakeFirst()
          : await findByName(db, projectId, ref.value);
      if (!row) throw notFound("interaction", ref.value);
      const environmentId = req.environmentId || row.environment_id;
      if (!environmentId) {
        throw new ConnectError(
          `interaction ${row.id} has no environment and the request names none`,
          Code.InvalidArgument,
        );
      }
      const [templates, env] = await Promise.all([
        templatesOf(db, projectId, [row]),
        findEnvironment(db, projectId, environmentId),
      ]);
      const interaction = interactionToProto(row, templates);
      const missing = interaction.prompts.find((p) => p.type === "template" && !p.template);
      if (missing) {
        throw new ConnectError(
          `prompt template ${missing.templateId} of interaction ${row.id} no longer exists`,
          Code.FailedPrecondition,
        );
      }
      return { interaction, ...(await resolvedEnvironment(projectId, env)) };
    },
  };
}
