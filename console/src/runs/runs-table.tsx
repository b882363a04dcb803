import { Anchor, Badge, Group, Table, Text } from "@mantine/core";
import { Link } from "wouter";
import type { Run } from "../api/client";
import { dateTime, duration, usd } from "../components/format";
import { StatusBadge } from "../components/status-badge";

/** A page of runs; each opens the run's page. */
export function RunsTable({ runs }: { runs: Run[] }) {
  if (runs.length === 0) {
    return (
      <Text c="dimmed" py="md" data-testid="runs-empty">
        No run matches.
      </Text>
    );
  }
  return (
    <div className="table-scroll">
      <Table striped highlightOnHover data-testid="runs-table" miw={860}>
        <Table.Thead>
          <Table.Tr>
            <Table.Th>Run</Table.Th>
            <Table.Th>Status</Table.Th>
            <Table.Th>Interaction</Table.Th>
            <Table.Th>Model</Table.Th>
            <Table.Th>Tags</Table.Th>
            <Table.Th ta="right">Time</Table.Th>
            <Table.Th ta="right">Tokens</Table.Th>
            <Table.Th ta="right">Cost</Table.Th>
            <Table.Th>Updated</Table.Th>
          </Table.Tr>
        </Table.Thead>
        <Table.Tbody>
          {runs.map((run) => (
            <Table.Tr key={run.id} data-run-id={run.id}>
              <Table.Td>
                <Anchor component={Link} href={`/runs/${run.id}`} className="mono" size="sm">
                  {run.id}
                </Anchor>
              </Table.Td>
              <Table.Td>
                <StatusBadge status={run.status} />
              </Table.Td>
              <Table.Td>{run.interaction.name}</Table.Td>
              <Table.Td className="mono">{run.modelId}</Table.Td>
              <Table.Td>
                <Group gap={4}>
                  {run.tags.map((tag) => (
                    <Badge key={tag} variant="outline" size="sm" tt="none" className="badge-whole">
                      {tag}
                    </Badge>
                  ))}
                </Group>
              </Table.Td>
              <Table.Td ta="right" className="nowrap">
                {duration(run.execution_time)}
              </Table.Td>
              <Table.Td ta="right">{run.token_use?.total ?? "–"}</Table.Td>
              <Table.Td ta="right">{usd(run.cost?.total)}</Table.Td>
              <Table.Td className="nowrap">{dateTime(run.updated_at)}</Table.Td>
            </Table.Tr>
          ))}
        </Table.Tbody>
      </Table>
    </div>
  );
}
