import "../ui/pages.css";
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
import { api, errorMessage } from "../api/client";
import { useAuth } from "../auth/session";
import { formatDate } from "../ui/format";
import { unwrap, useLoad } from "../ui/load";
import { ErrorAlert, LoadState } from "../ui/states";

/** The project's API keys (admin keys only): create one (its secret shown once), revoke. */
export default function ApiKeysPage() {
  const { session } = useAuth();
  if (session?.role !== "admin") {
    return (
      <Stack>
        <Title order={1}>API keys</Title>
        <Alert color="gray" role="status" data-testid="admin-only">
          API keys are managed with an admin key. This key ({session?.role ?? "unknown"}) can
          execute, read and edit interactions, and read environments and runs.
        </Alert>
      </Stack>
    );
  }
  return <AdminApiKeys />;
}

function AdminApiKeys() {
  const { loaded, reload } = useLoad(async () => unwrap(await api.GET("/api/v1/apikeys")), []);
  const [created, setCreated] = useState<{ name: string; key: string }>();
  const [revoking, setRevoking] = useState<string>();
  const [error, setError] = useState<string>();

  const revoke = async (id: string) => {
    setError(undefined);
    try {
      const answer = await api.DELETE("/api/v1/apikeys/{id}", { params: { path: { id } } });
      if (!answer.response.ok) throw new Error(errorMessage(answer.error));
      setRevoking(undefined);
      reload();
    } catch (err) {
      setError(errorMessage(err));
    }
  };

  return (
    <Stack>
      <Title order={1}>API keys</Title>
      <CreateKey
        onCreated={(key) => {
          setCreated(key);
          reload();
        }}
      />
      {created && (
        <CreatedKey name={created.name} secret={created.key} onDone={() => setCreated(undefined)} />
      )}
      {error && <ErrorAlert message={error} title="Not revoked" />}
      <LoadState loaded={loaded} retry={reload}>
        {(keys) => (
          <div className="table-scroll">
            <Table striped data-testid="api-keys">
              <Table.Thead>
                <Table.Tr>
                  <Table.Th>Name</Table.Th>
                  <Table.Th>Role</Table.Th>
                  <Table.Th>Key</Table.Th>
                  <Table.Th>Created</Table.Th>
                  <Table.Th>
                    <span className="visually-hidden-text">Actions</span>
                  </Table.Th>
                </Table.Tr>
              </Table.Thead>
              <Table.Tbody>
                {keys.map((k) => (
                  <Table.Tr key={k.id} data-testid={`key-${k.name}`}>
                    <Table.Td>{k.name || "(unnamed)"}</Table.Td>
                    <Table.Td>
                      <Badge variant="light" color={k.role === "admin" ? "grape" : "gray"}>
                        {k.role}
                      </Badge>
                    </Table.Td>
                    <Table.Td className="mono nowrap">{k.hint}</Table.Td>
                    <Table.Td className="nowrap">{formatDate(k.created_at)}</Table.Td>
                    <Table.Td>
                      {revoking === k.id ? (
                        <Group gap={4} wrap="nowrap">
                          <Button
                            size="compact-sm"
                            color="red"
                            onClick={() => void revoke(k.id)}
                            aria-label={`Confirm revoking ${k.name}`}
                          >
                            Revoke now
                          </Button>
                          <Button
                            size="compact-sm"
                            variant="subtle"
                            onClick={() => setRevoking(undefined)}
                          >
                            Keep
                          </Button>
                        </Group>
                      ) : (
                        <Button
                          size="compact-sm"
                          variant="light"
                          color="red"
                          onClick={() => setRevoking(k.id)}
                          aria-label={`Revoke ${k.name}`}
                        >
                          Revoke
                        </Button>
                      )}
                    </Table.Td>
                  </Table.Tr>
                ))}
              </Table.Tbody>
            </Table>
          </div>
        )}
      </LoadState>
    </Stack>
  );
}

function CreateKey({ onCreated }: { onCreated: (key: { name: string; key: string }) => void }) {
  const [name, setName] = useState("");
  const [role, setRole] = useState("member");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string>();
  const submit = async (event: FormEvent) => {
    event.preventDefault();
    setBusy(true);
    setError(undefined);
    try {
      const created = unwrap(
        await api.POST("/api/v1/apikeys", { body: { name: name.trim(), role } }),
      );
      setName("");
      onCreated({ name: created.name, key: created.key });
    } catch (err) {
      setError(errorMessage(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <Paper withBorder p="sm">
      <form onSubmit={(e) => void submit(e)} aria-label="Create an API key">
        <Stack gap="xs">
          <Title order={2} size="h4">
            Create a key
          </Title>
          <Group align="flex-end" wrap="wrap">
            <TextInput
              label="Key name"
              required
              value={name}
              onChange={(e) => setName(e.currentTarget.value)}
            />
            <Select
              label="Role"
              data={[
                { value: "member", label: "member (execute, read, edit interactions)" },
                { value: "admin", label: "admin (also keys and environments)" },
              ]}
              value={role}
              onChange={(v) => v && setRole(v)}
              allowDeselect={false}
            />
            <Button type="submit" loading={busy} disabled={!name.trim()}>
              Create key
            </Button>
          </Group>
          {error && <ErrorAlert message={error} title="Not created" />}
        </Stack>
      </form>
    </Paper>
  );
}

/** The new key's secret: shown here once, never again (the API keeps only its hash). */
function CreatedKey({
  name,
  secret,
  onDone,
}: {
  name: string;
  secret: string;
  onDone: () => void;
}) {
  const [copied, setCopied] = useState<"yes" | "no">();
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(secret);
      setCopied("yes");
    } catch {
      setCopied("no");
    }
  };
  return (
    <Alert color="green" title={`Key ${name} created`} data-testid="created-key">
      <Stack gap="xs">
        <Text size="sm">Copy it now: it is shown this once and cannot be shown again.</Text>
        <code className="secret-once" data-testid="created-secret">
          {secret}
        </code>
        <Group gap="xs">
          <Button size="xs" onClick={() => void copy()}>
            Copy the key
          </Button>
          <Button size="xs" variant="subtle" onClick={onDone}>
            Done
          </Button>
          {copied && (
            <Text size="sm" role="status">
              {copied === "yes"
                ? "Copied."
                : "The browser did not allow copying: select the key and copy it."}
            </Text>
          )}
        </Group>
      </Stack>
    </Alert>
  );
}
