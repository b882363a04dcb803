import { Anchor, Badge, Button, Group, Stack, Table, Text } from "@mantine/core";
import { Fragment, useMemo, useState } from "react";
import { Link } from "wouter";
import { duration } from "../components/format";
import { DiffView } from "../editors/lazy";
import { pretty } from "../ui/format";
import { diffMarks } from "./diff-marks";
import { dollars, pairOutcome } from "./experiment-view";
import { MarkedJson } from "./marked-json";
import type { Pair } from "./model";

/** A result as the merge view compares it: a text as it is, JSON indented. */
const asText = (value: unknown) => (typeof value === "string" ? value : pretty(value));

const TONES = {
  same: "gray",
  differs: "orange",
  failed: "red",
  running: "blue",
  idle: "gray",
} as const;

/**
 * The pairs side by side: the input, the original result and the candidate's, the values the
 * difference touches highlighted on each side; a link to the run replayed and to its replay, and
 * the two results in CodeMirror's merge view on demand (loaded then). On a phone each pair's cells
 * stack, labelled, rather than scroll sideways.
 */
export function PairsTable({ pairs }: { pairs: Pair[] }) {
  return (
    <div className="table-scroll">
      <Table className="pairs-table" data-testid="pairs" withRowBorders>
        <Table.Thead>
          <Table.Tr>
            <Table.Th scope="col">Pair</Table.Th>
            <Table.Th scope="col">Input</Table.Th>
            <Table.Th scope="col">Original result</Table.Th>
            <Table.Th scope="col">Candidate result</Table.Th>
          </Table.Tr>
        </Table.Thead>
        <Table.Tbody>
          {pairs.map((pair) => (
            <PairRow key={pair.position} pair={pair} />
          ))}
        </Table.Tbody>
      </Table>
    </div>
  );
}

function PairRow({ pair }: { pair: Pair }) {
  const [open, setOpen] = useState(false);
  const candidate = pair.candidate;
  const marks = useMemo(
    () => diffMarks(pair.original.result, candidate?.result, pair.diff),
    [pair.original.result, candidate?.result, pair.diff],
  );
  const outcome = pairOutcome(pair);
  const differs = !!candidate && !pair.exact_match && candidate.result !== undefined;
  const diffId = `pair-diff-${pair.position}`;
  return (
    <Fragment>
      <Table.Tr data-position={pair.position} data-outcome={outcome.tone}>
        <Table.Td>
          <Stack gap={4} align="flex-start">
            <Group gap={6} wrap="nowrap">
              <Text fw={600} size="sm">
                #{pair.position + 1}
              </Text>
              <Badge
                variant="light"
                color={TONES[outcome.tone]}
                className="badge-whole"
                data-testid="pair-outcome"
              >
                {outcome.label}
              </Badge>
            </Group>
            <Anchor
              component={Link}
              href={`/runs/${pair.source_run}`}
              size="sm"
              data-testid="source-run-link"
            >
              Original run
            </Anchor>
            {pair.run && (
              <Anchor component={Link} href={`/runs/${pair.run}`} size="sm" data-testid="run-link">
                New run
              </Anchor>
            )}
            {candidate && (
              <Text size="xs" c="dimmed">
                {duration(pair.original.latency_ms ?? undefined)} →{" "}
                {duration(candidate.latency_ms ?? undefined)}
                <br />
                {pair.original.tokens ?? "–"} → {candidate.tokens ?? "–"} tokens
                {(pair.original.cost !== null || candidate.cost !== null) && (
                  <>
                    <br />
                    {dollars(pair.original.cost)} → {dollars(candidate.cost)}
                  </>
                )}
              </Text>
            )}
            {pair.judge && (
              <Text size="xs" data-testid="judge-score">
                Judge:{" "}
                {pair.judge.score !== null ? pair.judge.score : (pair.judge.error ?? "no score")}
                {pair.judge.run && (
                  <>
                    {" "}
                    (
                    <Anchor component={Link} href={`/runs/${pair.judge.run}`} size="xs">
                      run
                    </Anchor>
                    )
                  </>
                )}
              </Text>
            )}
            {pair.attempts > 1 && (
              <Text size="xs" c="dimmed">
                {pair.attempts} attempts
              </Text>
            )}
          </Stack>
        </Table.Td>
        <Table.Td className="pair-result">
          <MarkedJson
            value={pair.input}
            side="input"
            label={`Input of pair ${pair.position + 1}`}
          />
        </Table.Td>
        <Table.Td
          className="pair-result"
          data-testid="original-result"
          data-label="Original result"
        >
          <MarkedJson
            value={pair.original.result}
            marks={marks.original}
            side="original"
            label={`Original result of pair ${pair.position + 1}`}
          />
          {!pair.original.schema_valid && (
            <Text size="xs" c="red">
              Not valid against the result schema.
            </Text>
          )}
        </Table.Td>
        <Table.Td
          className="pair-result"
          data-testid="candidate-result"
          data-label="Candidate result"
        >
          {candidate ? (
            <Stack gap={4}>
              {candidate.error && (
                <Text size="sm" c="red" data-testid="candidate-error">
                  {candidate.error.code}: {candidate.error.message}
                </Text>
              )}
              {candidate.result !== undefined && candidate.result !== null && (
                <MarkedJson
                  value={candidate.result}
                  marks={marks.candidate}
                  side="candidate"
                  label={`Candidate result of pair ${pair.position + 1}`}
                />
              )}
              {candidate.schema_valid === false && !candidate.error && (
                <Text size="xs" c="red">
                  Not valid against the result schema.
                </Text>
              )}
              {differs && (
                <Button
                  variant="subtle"
                  size="compact-xs"
                  w="fit-content"
                  onClick={() => setOpen((o) => !o)}
                  aria-expanded={open}
                  aria-controls={open ? diffId : undefined}
                >
                  {open ? "Hide the text difference" : "Compare as text"}
                </Button>
              )}
            </Stack>
          ) : (
            <Text size="sm" c="dimmed">
              {pair.status === "cancelled" ? "Not replayed (cancelled)." : `${pair.status}…`}
            </Text>
          )}
        </Table.Td>
      </Table.Tr>
      {open && candidate && (
        <Table.Tr id={diffId}>
          <Table.Td colSpan={4}>
            <DiffView
              original={asText(pair.original.result)}
              changed={asText(candidate.result)}
              label={`The difference of pair ${pair.position + 1}, original to candidate`}
              json
            />
          </Table.Td>
        </Table.Tr>
      )}
    </Fragment>
  );
}
