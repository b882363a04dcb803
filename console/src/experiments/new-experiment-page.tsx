import "../ui/pages.css";
import "./experiments.css";
import {
  Alert,
  Anchor,
  Autocomplete,
  Button,
  Fieldset,
  Group,
  Paper,
  Select,
  SimpleGrid,
  Stack,
  Text,
  TextInput,
  Title,
} from "@mantine/core";
import { useEffect, useMemo, useState, type FormEvent } from "react";
import { Link, useLocation, useSearch } from "wouter";
import { api } from "../api/client";
import { useApi } from "../components/use-api";
import { formatView, parseView } from "../runs/runs-view";
import { filtersOf } from "../runs/search-request";
import { unwrap, useLoad } from "../ui/load";
import {
  defaultTarget,
  describeView,
  experimentBody,
  formErrors,
  interactionNames,
  targetChoices,
  type ExperimentForm,
  type FormErrors,
} from "./experiment-view";
import { DEFAULT_CONCURRENCY, DEFAULT_RUNS, MAX_CONCURRENCY, MAX_RUNS } from "./model";

const EMPTY: ExperimentForm = {
  name: "",
  target: "",
  environment: "",
  model: "",
  temperature: "",
  maxTokens: "",
  judge: "",
  concurrency: String(DEFAULT_CONCURRENCY),
  limit: String(DEFAULT_RUNS),
};

/**
 * A new experiment over the runs page's search (`/experiments/new?q=…&tags=…`: the runs view's
 * own address, which the runs page's **Experiment…** opens): its name, the target (the project's
 * drafts and versions offered by name, any reference typed), settings to override, a judge, how
 * many runs at most and how many at once. `POST /experiments`, then the experiment's page.
 */
export default function NewExperimentPage() {
  const search = useSearch();
  const view = useMemo(() => ({ ...parseView(search), page: 1 }), [search]);
  const [, navigate] = useLocation();
  const [form, setForm] = useState<ExperimentForm>(EMPTY);
  const [errors, setErrors] = useState<FormErrors>({ fields: {} });
  const [busy, setBusy] = useState(false);
  const set = <K extends keyof ExperimentForm>(key: K, value: ExperimentForm[K]) => {
    setForm((f) => ({ ...f, [key]: value }));
    setErrors((e) => ({ ...e, fields: { ...e.fields, [key]: undefined } }));
  };

  // How many runs the search matches now (the experiment takes the newest, up to its limit).
  const counted = useApi(
    () =>
      api.POST("/api/v1/runs/search", {
        body: { query: view.q || undefined, filters: filtersOf(view, Date.now()), onlyMeta: true },
      }),
    [search],
  );
  const count = counted.data?.meta?.count;
  const matching = count?.total ?? count?.lower_bound;

  const { loaded: interactions } = useLoad(async () => {
    const [drafts, versions] = await Promise.all([
      api.GET("/api/v1/interactions", { params: { query: { limit: 1000, status: "draft" } } }),
      api.GET("/api/v1/interactions", { params: { query: { limit: 1000, status: "published" } } }),
    ]);
    return { drafts: unwrap(drafts), versions: unwrap(versions) };
  }, []);
  const choices =
    interactions.state === "ready"
      ? targetChoices(interactions.data.drafts, interactions.data.versions)
      : [];
  // The target starts as the draft of the interaction the runs are filtered by.
  useEffect(() => {
    if (interactions.state !== "ready") return;
    const target = defaultTarget(view, interactions.data.drafts, interactions.data.versions);
    if (target) setForm((f) => (f.target ? f : { ...f, target }));
  }, [interactions.state]);

  const { loaded: environments } = useLoad(
    async () =>
      unwrap(await api.GET("/api/v1/environments")).map((e) => ({ value: e.id, label: e.name })),
    [],
  );
  const { loaded: models } = useLoad(async () => {
    if (!form.environment) return [];
    const answer = await api.GET("/api/v1/environments/{id}/models", {
      params: { path: { id: form.environment } },
    });
    return answer.data?.models ?? [];
  }, [form.environment]);

  const submit = async (event: FormEvent) => {
    event.preventDefault();
    setBusy(true);
    setErrors({ fields: {} });
    const { data, error, response } = await api.POST("/api/v1/experiments", {
      body: experimentBody(form, view, Date.now()),
    });
    setBusy(false);
    if (data) navigate(`/experiments/${data.id}`);
    else setErrors(formErrors(error, response.status));
  };

  const limit = Number(form.limit);
  const lines = describeView(
    view,
    interactions.state === "ready"
      ? interactionNames(interactions.data.drafts, interactions.data.versions)
      : undefined,
  );
  return (
    <Stack>
      <Title order={1}>New experiment</Title>
      <Paper withBorder p="md" component="section" aria-label="The runs to replay">
        <Stack gap="xs">
          <Title order={2} size="h4">
            The runs to replay
          </Title>
          <ul className="source-lines" data-testid="experiment-search">
            {(lines.length ? lines : ["every run"]).map((line) => (
              <li key={line}>
                <Text span size="sm" className="mono">
                  {line}
                </Text>
              </li>
            ))}
          </ul>
          <Text size="sm" data-testid="matching" aria-live="polite">
            {counted.error
              ? `The search failed: ${counted.error}`
              : matching === undefined
                ? "Counting the runs…"
                : `${matching.toLocaleString()}${count?.lower_bound !== undefined ? "+" : ""} ${
                    matching === 1 ? "run matches" : "runs match"
                  } this search${
                    matching > 0 && Number.isInteger(limit) && limit > 0
                      ? `: the newest ${Math.min(matching, limit).toLocaleString()} will be replayed (runs that keep no input are skipped).`
                      : "."
                  }`}
          </Text>
          <Anchor component={Link} href={`/runs${formatView(view)}`} size="sm">
            Change the search
          </Anchor>
        </Stack>
      </Paper>
      <form onSubmit={(e) => void submit(e)} noValidate aria-label="New experiment">
        <Stack>
          {errors.message && (
            <Alert
              color="red"
              title="The experiment could not start"
              role="alert"
              data-testid="error"
            >
              {errors.message}
            </Alert>
          )}
          <SimpleGrid cols={{ base: 1, sm: 2 }}>
            <TextInput
              label="Name"
              required
              value={form.name}
              onChange={(e) => set("name", e.currentTarget.value)}
              error={errors.fields.name}
              maxLength={200}
            />
            <Autocomplete
              label="Target interaction"
              description="Replay against: Name@draft, Name@latest, Name@3, or an id"
              required
              data={choices}
              limit={50}
              value={form.target}
              onChange={(v) => set("target", v)}
              error={errors.fields.target}
              classNames={{ input: "mono" }}
              spellCheck={false}
            />
          </SimpleGrid>
          <Fieldset legend="Settings of the target (optional: its own when empty)">
            <SimpleGrid cols={{ base: 1, sm: 2, md: 4 }}>
              <Select
                label="Environment"
                placeholder="The interaction's"
                clearable
                data={environments.state === "ready" ? environments.data : []}
                value={form.environment || null}
                onChange={(v) => set("environment", v ?? "")}
                error={errors.fields.environment}
              />
              <Autocomplete
                label="Model"
                placeholder="The interaction's"
                data={models.state === "ready" ? models.data : []}
                value={form.model}
                onChange={(v) => set("model", v)}
                error={errors.fields.model}
                classNames={{ input: "mono" }}
              />
              <TextInput
                label="Temperature"
                inputMode="decimal"
                value={form.temperature}
                onChange={(e) => set("temperature", e.currentTarget.value)}
                error={errors.fields.temperature}
              />
              <TextInput
                label="Max tokens"
                inputMode="numeric"
                value={form.maxTokens}
                onChange={(e) => set("maxTokens", e.currentTarget.value)}
                error={errors.fields.maxTokens}
              />
            </SimpleGrid>
          </Fieldset>
          <SimpleGrid cols={{ base: 1, sm: 3 }}>
            <Autocomplete
              label="Judge (optional)"
              description="An interaction whose result's number field score rates each pair"
              data={choices}
              limit={50}
              value={form.judge}
              onChange={(v) => set("judge", v)}
              error={errors.fields.judge}
              classNames={{ input: "mono" }}
              spellCheck={false}
            />
            <TextInput
              label="Runs at most"
              description={`The newest first, 1 to ${MAX_RUNS}`}
              inputMode="numeric"
              value={form.limit}
              onChange={(e) => set("limit", e.currentTarget.value)}
              error={errors.fields.limit}
            />
            <TextInput
              label="At once"
              description={`Pairs replayed at the same time, 1 to ${MAX_CONCURRENCY}`}
              inputMode="numeric"
              value={form.concurrency}
              onChange={(e) => set("concurrency", e.currentTarget.value)}
              error={errors.fields.concurrency}
            />
          </SimpleGrid>
          <Group>
            <Button type="submit" loading={busy} disabled={matching === 0}>
              Start the experiment
            </Button>
            <Anchor component={Link} href="/experiments" size="sm">
              All experiments
            </Anchor>
          </Group>
        </Stack>
      </form>
    </Stack>
  );
}
