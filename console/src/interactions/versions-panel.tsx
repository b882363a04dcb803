import {
  Alert,
  Badge,
  Button,
  Group,
  Paper,
  Select,
  Stack,
  Table,
  Text,
  TextInput,
  Title,
} from "@mantine/core";
import { useState, type FormEvent } from "react";
import { useSearchParams } from "wouter";
import { api, errorMessage } from "../api/client";
import { DiffView } from "../editors/lazy";
import { formatDate, splitTags } from "../ui/format";
import { unwrap, useLoad } from "../ui/load";
import { ErrorAlert, LoadState } from "../ui/states";
import type { Interaction, VersionRef } from "./model";
import { snapshotOf } from "./snapshot";

const DRAFT = "draft";

/** Publishing, the published versions, and the difference between any two (or one and the draft). */
export function VersionsPanel({ interaction }: { interaction: Interaction }) {
  const { loaded, reload } = useLoad(
    async () =>
      unwrap(
        await api.GET("/api/v1/interactions/{id}/versions", {
          params: { path: { id: interaction.id } },
        }),
      ),
    [interaction.id],
  );
  return (
    <Stack>
      <PublishForm interaction={interaction} onPublished={reload} />
      <LoadState loaded={loaded} retry={reload}>
        {(versions) => (
          <>
            <VersionsTable versions={versions} />
            {versions.length > 0 && <VersionsDiff interaction={interaction} versions={versions} />}
          </>
        )}
      </LoadState>
    </Stack>
  );
}

function PublishForm({
  interaction,
  onPublished,
}: {
  interaction: Interaction;
  onPublished: () => void;
}) {
  const [tags, setTags] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string>();
  const [published, setPublished] = useState<number>();
  const submit = async (event: FormEvent) => {
    event.preventDefault();
    setBusy(true);
    setError(undefined);
    try {
      const version = unwrap(
        await api.POST("/api/v1/interactions/{id}/publish", {
          params: { path: { id: interaction.id } },
          body: tags.trim() ? { tags: splitTags(tags) } : {},
        }),
      );
      setPublished(version.version);
      setTags("");
      onPublished();
    } catch (err) {
      setError(errorMessage(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <Paper withBorder p="sm">
      <form onSubmit={(e) => void submit(e)} aria-label="Publish">
        <Stack gap="xs">
          <Title order={2} size="h4">
            Publish the saved draft
          </Title>
          <Group align="flex-end" wrap="wrap">
            <TextInput
              label="Tags of the version"
              description="Separated by commas; empty: the draft's tags"
              placeholder="prod, beta"
              value={tags}
              onChange={(e) => setTags(e.currentTarget.value)}
            />
            <Button type="submit" loading={busy}>
              Publish
            </Button>
          </Group>
          {published !== undefined && (
            <Text role="status" size="sm" c="green" data-testid="published">
              Version {published} published.
            </Text>
          )}
          {error && <ErrorAlert message={error} title="Not published" />}
        </Stack>
      </form>
    </Paper>
  );
}

function VersionsTable({ versions }: { versions: VersionRef[] }) {
  if (versions.length === 0) {
    return <Text c="dimmed">No version yet: publish the draft to make version 1.</Text>;
  }
  return (
    <div className="table-scroll">
      <Table striped highlightOnHover data-testid="versions">
        <Table.Thead>
          <Table.Tr>
            <Table.Th>Version</Table.Th>
            <Table.Th>Tags</Table.Th>
            <Table.Th>Published</Table.Th>
          </Table.Tr>
        </Table.Thead>
        <Table.Tbody>
          {versions.map((v) => (
            <Table.Tr key={v.id}>
              <Table.Td className="nowrap">
                {v.version}
                {v.latest && (
                  <Text span size="sm" c="dimmed">
                    {" "}
                    (latest)
                  </Text>
                )}
              </Table.Td>
              {/* Plain text: badges would cut long tags short on a narrow screen. */}
              <Table.Td className="mono">{v.tags.join(", ") || "—"}</Table.Td>
              <Table.Td className="nowrap">{formatDate(v.created_at)}</Table.Td>
            </Table.Tr>
          ))}
        </Table.Tbody>
      </Table>
    </div>
  );
}

/** The two sides chosen (in the URL: `?from=<version>&to=<version|draft>`), their texts diffed. */
function VersionsDiff({
  interaction,
  versions,
}: {
  interaction: Interaction;
  versions: VersionRef[];
}) {
  const [params, setParams] = useSearchParams();
  const options = [
    { value: DRAFT, label: "Draft" },
    ...versions.map((v) => ({ value: String(v.version), label: `Version ${v.version}` })),
  ];
  const valid = (value: string | null) =>
    value && options.some((o) => o.value === value) ? value : undefined;
  const to = valid(params.get("to")) ?? DRAFT;
  // Versions come newest first: by default the latest against the draft.
  const from = valid(params.get("from")) ?? String(versions[0]?.version ?? DRAFT);
  const choose = (key: "from" | "to", value: string | null) =>
    setParams(
      (prev) => {
        const next = new URLSearchParams(prev);
        if (value) next.set(key, value);
        return next;
      },
      { replace: true },
    );

  const idOf = (side: string) =>
    versions.find((v) => String(v.version) === side)?.id ?? interaction.id;
  const { loaded, reload } = useLoad(async () => {
    const read = async (side: string) =>
      unwrap(await api.GET("/api/v1/interactions/{id}", { params: { path: { id: idOf(side) } } }));
    const [a, b] = await Promise.all([read(from), read(to)]);
    return { a: snapshotOf(a), b: snapshotOf(b) };
  }, [from, to, interaction.id, interaction.updated_at, versions.length]);

  return (
    <Paper withBorder p="sm">
      <Stack>
        <Title order={2} size="h4">
          Difference
        </Title>
        <Group wrap="wrap">
          <Select
            label="From"
            data={options}
            value={from}
            onChange={(v) => choose("from", v)}
            allowDeselect={false}
          />
          <Select
            label="To"
            data={options}
            value={to}
            onChange={(v) => choose("to", v)}
            allowDeselect={false}
          />
        </Group>
        <LoadState loaded={loaded} retry={reload}>
          {({ a, b }) => (
            <Stack data-testid="diff">
              {a.prompts === b.prompts && a.schema === b.schema && a.settings === b.settings && (
                <Alert color="gray" role="status">
                  No difference.
                </Alert>
              )}
              {(
                [
                  ["prompts", "Prompts", false],
                  ["schema", "Result schema", true],
                  ["settings", "Settings", true],
                ] as const
              ).map(([key, title, isJson]) => (
                <section key={key} aria-label={`${title} difference`} data-testid={`diff-${key}`}>
                  <Group gap="xs" mb={4}>
                    <Title order={3} size="h5">
                      {title}
                    </Title>
                    {a[key] === b[key] ? (
                      <Badge size="sm" variant="light" color="gray">
                        unchanged
                      </Badge>
                    ) : (
                      <Badge size="sm" variant="light" color="orange">
                        changed
                      </Badge>
                    )}
                  </Group>
                  <DiffView
                    original={a[key]}
                    changed={b[key]}
                    json={isJson}
                    label={`${title}: ${from} to ${to}`}
                  />
                </section>
              ))}
            </Stack>
          )}
        </LoadState>
      </Stack>
    </Paper>
  );
}
