import "../ui/pages.css";
import { Alert, Anchor, Badge, Button, Group, Stack, Table, Text, Title } from "@mantine/core";
import { Link } from "wouter";
import { api } from "../api/client";
import { useAuth } from "../auth/session";
import { unwrap, useLoad } from "../ui/load";
import { LoadState } from "../ui/states";

/** The project's environments (a provider, its endpoint and models; keys never shown). */
export default function EnvironmentsPage() {
  const { session } = useAuth();
  const admin = session?.role === "admin";
  const { loaded, reload } = useLoad(async () => unwrap(await api.GET("/api/v1/environments")), []);
  return (
    <Stack>
      <Group justify="space-between">
        <Title order={1}>Environments</Title>
        {admin && (
          <Button component={Link} href="/environments/new">
            New environment
          </Button>
        )}
      </Group>
      {!admin && (
        <Alert color="gray" role="status">
          Environments are created and changed with an admin key; this key reads them.
        </Alert>
      )}
      <LoadState loaded={loaded} retry={reload}>
        {(environments) =>
          environments.length === 0 ? (
            <Text c="dimmed">No environment yet.</Text>
          ) : (
            <div className="table-scroll">
              <Table striped highlightOnHover data-testid="environments">
                <Table.Thead>
                  <Table.Tr>
                    <Table.Th>Name</Table.Th>
                    <Table.Th>Provider</Table.Th>
                    <Table.Th>Default model</Table.Th>
                    <Table.Th>Key</Table.Th>
                  </Table.Tr>
                </Table.Thead>
                <Table.Tbody>
                  {environments.map((e) => (
                    <Table.Tr key={e.id}>
                      <Table.Td>
                        <Anchor component={Link} href={`/environments/${e.id}`}>
                          {e.name}
                        </Anchor>
                      </Table.Td>
                      <Table.Td>{e.provider}</Table.Td>
                      <Table.Td className="mono">{e.default_model || "—"}</Table.Td>
                      <Table.Td>
                        {e.api_key_hint ? (
                          <Badge variant="light" color="green" title={`Ends ${e.api_key_hint}`}>
                            set
                          </Badge>
                        ) : (
                          <Badge variant="light" color="gray">
                            none
                          </Badge>
                        )}
                      </Table.Td>
                    </Table.Tr>
                  ))}
                </Table.Tbody>
              </Table>
            </div>
          )
        }
      </LoadState>
    </Stack>
  );
}
