import "../ui/pages.css";
import {
  Anchor,
  Badge,
  Button,
  Group,
  Select,
  Stack,
  Table,
  Text,
  TextInput,
  Title,
} from "@mantine/core";
import { useDeferredValue } from "react";
import { Link, useSearchParams } from "wouter";
import { api } from "../api/client";
import { formatDate, splitTags } from "../ui/format";
import { unwrap, useLoad } from "../ui/load";
import { LoadState } from "../ui/states";
import type { InteractionRef } from "./model";

const STATUSES = [
  { value: "draft", label: "Drafts" },
  { value: "published", label: "Published versions" },
  { value: "archived", label: "Archived" },
];

/**
 * The interactions, filtered as `GET /interactions` filters (status: the drafts by default, or the
 * published versions, or the archived drafts; tags: those of the drafts or of the versions), and
 * by a search in their names (the API matches a name exactly, so the search looks within the
 * list it answers). The filters live in the URL.
 */
export default function InteractionsPage() {
  const [params, setParams] = useSearchParams();
  const search = params.get("q") ?? "";
  const status = (params.get("status") ?? "draft") as "draft" | "published" | "archived";
  const tags = params.get("tags") ?? "";
  const deferredSearch = useDeferredValue(search);
  const setParam = (key: string, value: string) =>
    setParams(
      (prev) => {
        const next = new URLSearchParams(prev);
        if (value) next.set(key, value);
        else next.delete(key);
        return next;
      },
      { replace: true },
    );

  const tagList = splitTags(tags);
  const { loaded, reload } = useLoad(async () => {
    // With a status, tags select among what it picks: drafts by their own tags, versions by
    // those they were published with.
    const query = { limit: 1000, status, ...(tagList.length > 0 ? { tags: tagList } : {}) };
    return unwrap(await api.GET("/api/v1/interactions", { params: { query } }));
  }, [status, tagList.join(",")]);

  const { loaded: tagsLoaded } = useLoad(
    async () => unwrap(await api.GET("/api/v1/interactions/tags")).map((t) => t.tag),
    [],
  );

  return (
    <Stack>
      <Group justify="space-between">
        <Title order={1}>Interactions</Title>
        <Button component={Link} href="/interactions/new">
          New interaction
        </Button>
      </Group>
      <Group align="flex-end" wrap="wrap" role="search" aria-label="Filter interactions">
        <TextInput
          label="Name"
          placeholder="Search in names"
          value={search}
          onChange={(e) => setParam("q", e.currentTarget.value)}
          type="search"
        />
        <Select
          label="Status"
          data={STATUSES}
          value={status}
          onChange={(v) => setParam("status", v === "draft" ? "" : (v ?? ""))}
          allowDeselect={false}
        />
        <TextInput
          label="Tags"
          placeholder="prod, beta"
          description={
            tagsLoaded.state === "ready" && tagsLoaded.data.length > 0
              ? `In use: ${tagsLoaded.data.slice(0, 8).join(", ")}`
              : undefined
          }
          value={tags}
          onChange={(e) => setParam("tags", e.currentTarget.value)}
        />
      </Group>
      <LoadState loaded={loaded} retry={reload}>
        {(interactions) => (
          <InteractionsTable interactions={interactions} search={deferredSearch} />
        )}
      </LoadState>
    </Stack>
  );
}

function InteractionsTable({
  interactions,
  search,
}: {
  interactions: InteractionRef[];
  search: string;
}) {
  const needle = search.trim().toLowerCase();
  const shown = needle
    ? interactions.filter((i) => i.name.toLowerCase().includes(needle))
    : interactions;
  if (shown.length === 0) {
    return (
      <Text c="dimmed" data-testid="empty">
        {interactions.length === 0
          ? "No interaction matches these filters."
          : `No interaction's name contains “${search}”.`}
      </Text>
    );
  }
  return (
    <div className="table-scroll">
      <Table striped highlightOnHover data-testid="interactions">
        <Table.Thead>
          <Table.Tr>
            <Table.Th>Name</Table.Th>
            <Table.Th>Status</Table.Th>
            <Table.Th>Prompts</Table.Th>
            <Table.Th>Updated</Table.Th>
          </Table.Tr>
        </Table.Thead>
        <Table.Tbody>
          {shown.map((i) => (
            <Table.Tr key={i.id}>
              <Table.Td>
                <Anchor component={Link} href={`/interactions/${i.parent ?? i.id}`}>
                  {i.name}
                </Anchor>
                {i.description && (
                  <Text size="xs" c="dimmed" lineClamp={1}>
                    {i.description}
                  </Text>
                )}
              </Table.Td>
              <Table.Td>
                <Badge variant="light" color={i.status === "published" ? "green" : "gray"}>
                  {i.status === "published" ? `v${i.version}` : i.status}
                </Badge>
              </Table.Td>
              <Table.Td>{i.prompts.length}</Table.Td>
              <Table.Td className="nowrap">{formatDate(i.updated_at)}</Table.Td>
            </Table.Tr>
          ))}
        </Table.Tbody>
      </Table>
    </div>
  );
}
