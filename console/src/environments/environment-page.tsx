import "../ui/pages.css";
import {
  Alert,
  Anchor,
  Badge,
  Button,
  Checkbox,
  Fieldset,
  Group,
  PasswordInput,
  Select,
  SimpleGrid,
  Stack,
  Text,
  TextInput,
  Title,
} from "@mantine/core";
import { useState, type FormEvent } from "react";
import { Link, useLocation } from "wouter";
import { api, errorMessage } from "../api/client";
import type { paths } from "../api/schema";
import { useAuth } from "../auth/session";
import { CodeEditor } from "../editors/lazy";
import { parseJson, pretty, splitTags } from "../ui/format";
import { unwrap, useLoad } from "../ui/load";
import { ErrorAlert, LoadState } from "../ui/states";

type Environment =
  paths["/api/v1/environments/{id}"]["get"]["responses"][200]["content"]["application/json"];

const PROVIDERS = [
  "openai",
  "openai_compatible",
  "azure_openai",
  "anthropic",
  "google",
  "virtual_lb",
  "test",
];

/** An environment's page (`/environments/:id`), or a new one (`/environments/new`). */
export default function EnvironmentPage({ id }: { id?: string }) {
  const { loaded, reload, setLoaded } = useLoad(
    async () =>
      id
        ? unwrap(await api.GET("/api/v1/environments/{id}", { params: { path: { id } } }))
        : undefined,
    [id],
  );
  return (
    <Stack>
      <Anchor component={Link} href="/environments" size="sm">
        ← Environments
      </Anchor>
      <LoadState loaded={loaded} retry={reload}>
        {(environment) => (
          <>
            <Title order={1}>{environment ? environment.name : "New environment"}</Title>
            <EnvironmentForm
              key={environment?.updated_at ?? "new"}
              environment={environment}
              onSaved={(saved) => setLoaded({ state: "ready", data: saved })}
            />
            {environment && <Models id={environment.id} />}
          </>
        )}
      </LoadState>
    </Stack>
  );
}

function EnvironmentForm({
  environment,
  onSaved,
}: {
  environment?: Environment;
  onSaved: (environment: Environment) => void;
}) {
  const { session } = useAuth();
  const admin = session?.role === "admin";
  const [, navigate] = useLocation();
  const [name, setName] = useState(environment?.name ?? "");
  const [provider, setProvider] = useState(environment?.provider ?? "openai");
  const [endpoint, setEndpoint] = useState(environment?.endpoint_url ?? "");
  const [defaultModel, setDefaultModel] = useState(environment?.default_model ?? "");
  const [models, setModels] = useState((environment?.enabled_models ?? []).join(", "));
  const [config, setConfig] = useState(pretty(environment?.config ?? {}));
  // The provider key is write-only: this field starts empty and is sent only when typed in.
  const [key, setKey] = useState("");
  const [removeKey, setRemoveKey] = useState(false);
  const [errors, setErrors] = useState<Record<string, string>>({});
  const [error, setError] = useState<string>();
  const [saved, setSaved] = useState(false);
  const [busy, setBusy] = useState(false);

  const submit = async (event: FormEvent) => {
    event.preventDefault();
    setError(undefined);
    setSaved(false);
    const found: Record<string, string> = {};
    if (!name.trim()) found.name = "An environment needs a name.";
    const parsed = parseJson(config);
    if (parsed.error) found.config = parsed.error;
    setErrors(found);
    if (Object.keys(found).length > 0) return;
    const body = {
      name: name.trim(),
      provider,
      endpoint_url: endpoint.trim(),
      default_model: defaultModel.trim(),
      enabled_models: splitTags(models),
      config: (parsed.value ?? {}) as Record<string, unknown>,
      ...(removeKey ? { api_key: "" } : key ? { api_key: key } : {}),
    };
    setBusy(true);
    try {
      const answer = environment
        ? await api.PUT("/api/v1/environments/{id}", {
            params: { path: { id: environment.id } },
            body,
          })
        : await api.POST("/api/v1/environments", { body });
      const result = unwrap(answer);
      setKey("");
      setRemoveKey(false);
      setSaved(true);
      if (environment) onSaved(result);
      else navigate(`/environments/${result.id}`, { replace: true });
    } catch (err) {
      const message = errorMessage(err);
      const field = /^(?:body[/.])?(\w+)/.exec(message)?.[1];
      const map: Record<string, string> = {
        name: "name",
        endpoint_url: "endpoint",
        provider: "provider",
        config: "config",
        default_model: "defaultModel",
        enabled_models: "models",
      };
      if (field && map[field]) setErrors({ [map[field]]: message });
      setError(message);
    } finally {
      setBusy(false);
    }
  };

  return (
    <form onSubmit={(e) => void submit(e)} aria-label="Environment" noValidate>
      <Stack>
        {error && <ErrorAlert message={error} title="Not saved" />}
        {saved && (
          <Text role="status" c="green" size="sm" data-testid="saved">
            Saved.
          </Text>
        )}
        <Fieldset legend="Provider" disabled={!admin}>
          <SimpleGrid cols={{ base: 1, sm: 2 }}>
            <TextInput
              label="Name"
              required
              value={name}
              onChange={(e) => setName(e.currentTarget.value)}
              error={errors.name}
            />
            <Select
              label="Provider"
              data={PROVIDERS}
              value={provider}
              onChange={(v) => v && setProvider(v)}
              allowDeselect={false}
              error={errors.provider}
            />
            <TextInput
              label="Endpoint URL"
              description="Empty: the provider's own"
              value={endpoint}
              onChange={(e) => setEndpoint(e.currentTarget.value)}
              error={errors.endpoint}
            />
            <TextInput
              label="Default model"
              value={defaultModel}
              onChange={(e) => setDefaultModel(e.currentTarget.value)}
              error={errors.defaultModel}
            />
            <TextInput
              label="Enabled models"
              description="Separated by commas"
              value={models}
              onChange={(e) => setModels(e.currentTarget.value)}
              error={errors.models}
            />
            <Stack gap={4}>
              <PasswordInput
                label="Provider key"
                description={
                  environment?.api_key_hint
                    ? `A key is stored (ends ${environment.api_key_hint}); it is never shown. Type a new one to replace it.`
                    : "Write-only: stored sealed and never shown again."
                }
                placeholder={environment?.api_key_hint ? "Unchanged" : "No key"}
                value={key}
                onChange={(e) => {
                  setKey(e.currentTarget.value);
                  setRemoveKey(false);
                }}
                autoComplete="off"
              />
              {environment?.api_key_hint && (
                <Checkbox
                  label="Remove the stored key"
                  checked={removeKey}
                  onChange={(e) => {
                    setRemoveKey(e.currentTarget.checked);
                    if (e.currentTarget.checked) setKey("");
                  }}
                />
              )}
            </Stack>
          </SimpleGrid>
        </Fieldset>
        <Fieldset legend="Configuration (JSON)" disabled={!admin}>
          <Stack gap={4}>
            <Text size="sm" c="dimmed">
              Provider settings: <code>api_version</code>, <code>prices</code>,{" "}
              <code>structured_output</code>, <code>max_repairs</code>, a virtual environment's{" "}
              <code>entries</code>…
            </Text>
            <CodeEditor
              language="json"
              label="Configuration (JSON)"
              value={config}
              onChange={setConfig}
              invalid={Boolean(errors.config)}
              readOnly={!admin}
              testId="environment-config"
            />
            {errors.config && (
              <div className="field-error" role="alert">
                {errors.config}
              </div>
            )}
          </Stack>
        </Fieldset>
        {admin ? (
          <Group>
            <Button type="submit" loading={busy}>
              {environment ? "Save" : "Create environment"}
            </Button>
          </Group>
        ) : (
          <Alert color="gray" role="status">
            Changing an environment takes an admin key.
          </Alert>
        )}
      </Stack>
    </form>
  );
}

/** The models the environment offers (`GET /environments/:id/models`). */
function Models({ id }: { id: string }) {
  const { loaded, reload } = useLoad(
    async () =>
      unwrap(await api.GET("/api/v1/environments/{id}/models", { params: { path: { id } } })),
    [id],
  );
  return (
    <Stack gap="xs">
      <Title order={2} size="h4">
        Models
      </Title>
      <LoadState loaded={loaded} retry={reload}>
        {({ models, source }) => (
          <Stack gap={4} data-testid="models">
            <Text size="sm" c="dimmed">
              {source === "provider" ? "The provider's list" : "The enabled models"}
            </Text>
            <Group gap={6}>
              {models.length === 0 ? (
                <Text size="sm">None listed.</Text>
              ) : (
                models.map((m) => (
                  <Badge key={m} variant="outline" className="mono">
                    {m}
                  </Badge>
                ))
              )}
            </Group>
          </Stack>
        )}
      </LoadState>
    </Stack>
  );
}
