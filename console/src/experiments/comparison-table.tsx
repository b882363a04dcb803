import { Table, Text } from "@mantine/core";
import { comparisonRows } from "./experiment-view";
import type { Comparison } from "./model";

const ARROWS = { better: "▲ ", worse: "▼ ", changed: "≠ ", same: "", none: "" } as const;

/**
 * The comparison's totals side by side, original and candidate, each measure's change beside:
 * for the better in green, for the worse in red (a lower latency, tokens or cost is better), the
 * candidate's cell marked whenever it differs.
 */
export function ComparisonTable({ comparison }: { comparison: Comparison }) {
  const rows = comparisonRows(comparison);
  return (
    <div className="table-scroll">
      <Table
        className="comparison-table"
        data-testid="comparison"
        withTableBorder
        horizontalSpacing="xs"
        fz="sm"
      >
        <Table.Caption>
          {comparison.pairs === 0
            ? "No pair is done yet."
            : `Over the ${comparison.pairs} ${comparison.pairs === 1 ? "pair" : "pairs"} done; the exact match and the judge compare each pair's two results.`}
        </Table.Caption>
        <Table.Thead>
          <Table.Tr>
            <Table.Th scope="col">Measure</Table.Th>
            <Table.Th scope="col">Original</Table.Th>
            <Table.Th scope="col">Candidate</Table.Th>
            <Table.Th scope="col">Change</Table.Th>
          </Table.Tr>
        </Table.Thead>
        <Table.Tbody>
          {rows.map((row) => (
            <Table.Tr key={row.key} data-measure={row.key}>
              <Table.Th scope="row">{row.label}</Table.Th>
              <Table.Td>{row.original}</Table.Td>
              <Table.Td
                className={
                  row.trend === "same" || row.trend === "none" ? undefined : "cell-changed"
                }
              >
                {row.candidate}
              </Table.Td>
              <Table.Td>
                <Text span size="sm" className={`trend-${row.trend}`} data-trend={row.trend}>
                  {ARROWS[row.trend]}
                  {row.change}
                </Text>
              </Table.Td>
            </Table.Tr>
          ))}
        </Table.Tbody>
      </Table>
    </div>
  );
}
