import { Table } from "@mantine/core";
import type { Run } from "../api/client";
import { duration } from "../components/format";

/** Each try of a run: repairs of an invalid answer, other entries of a virtual environment. */
export function AttemptsTable({ attempts }: { attempts: NonNullable<Run["attempts"]> }) {
  return (
    <div className="table-scroll">
      <Table miw={560} data-testid="attempts">
        <Table.Thead>
          <Table.Tr>
            <Table.Th>#</Table.Th>
            <Table.Th>Environment</Table.Th>
            <Table.Th>Model</Table.Th>
            <Table.Th>Outcome</Table.Th>
            <Table.Th ta="right">Tokens</Table.Th>
            <Table.Th ta="right">Duration</Table.Th>
          </Table.Tr>
        </Table.Thead>
        <Table.Tbody>
          {attempts.map((a) => (
            <Table.Tr key={a.number}>
              <Table.Td>{a.number}</Table.Td>
              <Table.Td className="mono">{a.environment ?? "–"}</Table.Td>
              <Table.Td className="mono">{a.model ?? "–"}</Table.Td>
              <Table.Td>{a.error ? `${a.error.code}: ${a.error.message}` : "ok"}</Table.Td>
              <Table.Td ta="right">{a.token_use?.total ?? "–"}</Table.Td>
              <Table.Td ta="right">
                {a.duration_ms === undefined ? "–" : duration(a.duration_ms)}
              </Table.Td>
            </Table.Tr>
          ))}
        </Table.Tbody>
      </Table>
    </div>
  );
}
