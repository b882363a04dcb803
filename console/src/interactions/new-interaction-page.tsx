import "../ui/pages.css";
import { Anchor, Stack, Title } from "@mantine/core";
import { useState } from "react";
import { Link, useLocation } from "wouter";
import { useLoad } from "../ui/load";
import { LoadState } from "../ui/states";
import { DraftEditor } from "./draft-editor";
import { listEnvironments } from "./environments";
import { emptyDraft, type DraftForm } from "./model";

/** A new interaction: the draft editor, empty, answered by `POST /interactions`. */
export default function NewInteractionPage() {
  const [, navigate] = useLocation();
  const [form, setForm] = useState<DraftForm>(emptyDraft);
  const { loaded, reload } = useLoad(async () => {
    const environments = await listEnvironments();
    // The first environment, as a start (most projects have one).
    setForm((f) => (f.environment ? f : { ...f, environment: environments[0]?.id ?? "" }));
    return environments;
  }, []);
  return (
    <Stack>
      <Anchor component={Link} href="/interactions" size="sm">
        ← Interactions
      </Anchor>
      <Title order={1}>New interaction</Title>
      <LoadState loaded={loaded} retry={reload}>
        {(environments) => (
          <DraftEditor
            form={form}
            setForm={(update) => setForm(update)}
            environments={environments}
            onSaved={(saved) => navigate(`/interactions/${saved.id}`, { replace: true })}
          />
        )}
      </LoadState>
    </Stack>
  );
}
