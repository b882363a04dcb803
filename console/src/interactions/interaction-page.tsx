import "../ui/pages.css";
import { Anchor, Badge, Group, Stack, Tabs, Text, Title } from "@mantine/core";
import { useEffect, useState } from "react";
import { Link, useLocation } from "wouter";
import { api } from "../api/client";
import { unwrap, useLoad } from "../ui/load";
import { LoadState } from "../ui/states";
import { DraftEditor } from "./draft-editor";
import { listEnvironments } from "./environments";
import { toForm, type DraftForm, type Interaction } from "./model";
import { Playground } from "./playground";
import { VersionsPanel } from "./versions-panel";

type Tab = "draft" | "playground" | "versions";

/** An interaction: its draft (editable), the playground, and its versions (publish, diff). */
export default function InteractionPage({ id, tab }: { id: string; tab?: string }) {
  const { loaded, reload, setLoaded } = useLoad(async () => {
    const [interaction, environments] = await Promise.all([
      api.GET("/api/v1/interactions/{id}", { params: { path: { id } } }).then(unwrap),
      listEnvironments(),
    ]);
    return { interaction, environments };
  }, [id]);
  return (
    <LoadState loaded={loaded} retry={reload}>
      {({ interaction, environments }) => (
        <Loaded
          interaction={interaction}
          tab={(["playground", "versions"].includes(tab ?? "") ? tab : "draft") as Tab}
          environments={environments}
          onSaved={(saved) =>
            setLoaded({ state: "ready", data: { interaction: saved, environments } })
          }
        />
      )}
    </LoadState>
  );
}

function Loaded({
  interaction,
  tab,
  environments,
  onSaved,
}: {
  interaction: Interaction;
  tab: Tab;
  environments: Parameters<typeof DraftEditor>[0]["environments"];
  onSaved: (interaction: Interaction) => void;
}) {
  const [, navigate] = useLocation();
  const [form, setFormState] = useState<DraftForm>(() => toForm(interaction));
  const [dirty, setDirty] = useState(false);
  const setForm = (update: (form: DraftForm) => DraftForm) => {
    setFormState(update);
    setDirty(true);
  };
  // Leaving the page (a reload, another site) with unsaved edits asks first.
  useEffect(() => {
    if (!dirty) return;
    const ask = (event: BeforeUnloadEvent) => event.preventDefault();
    window.addEventListener("beforeunload", ask);
    return () => window.removeEventListener("beforeunload", ask);
  }, [dirty]);
  const base = `/interactions/${interaction.id}`;
  return (
    <Stack>
      <Stack gap={4}>
        <Anchor component={Link} href="/interactions" size="sm">
          ← Interactions
        </Anchor>
        <Group gap="sm">
          <Title order={1}>{interaction.name}</Title>
          <Badge variant="light">{interaction.status}</Badge>
          {dirty && (
            <Badge variant="light" color="yellow">
              unsaved changes
            </Badge>
          )}
        </Group>
        <Text size="sm" c="dimmed" className="mono">
          {interaction.id}
        </Text>
      </Stack>
      <Tabs
        value={tab}
        onChange={(value) => navigate(value === "draft" ? base : `${base}/${value}`)}
        keepMounted={false}
      >
        <Tabs.List>
          <Tabs.Tab value="draft">Draft</Tabs.Tab>
          <Tabs.Tab value="playground">Playground</Tabs.Tab>
          <Tabs.Tab value="versions">Versions</Tabs.Tab>
        </Tabs.List>
        <Tabs.Panel value="draft" pt="md">
          <DraftEditor
            form={form}
            setForm={setForm}
            interactionId={interaction.id}
            environments={environments}
            onSaved={(saved) => {
              setFormState(toForm(saved));
              setDirty(false);
              onSaved(saved);
            }}
          />
        </Tabs.Panel>
        <Tabs.Panel value="playground" pt="md">
          <Playground interaction={interaction} dirty={dirty} />
        </Tabs.Panel>
        <Tabs.Panel value="versions" pt="md">
          <VersionsPanel interaction={interaction} />
        </Tabs.Panel>
      </Tabs>
    </Stack>
  );
}
