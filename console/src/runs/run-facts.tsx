import { Anchor, Badge, Group, SimpleGrid, Stack, Text } from "@mantine/core";
import type { ReactNode } from "react";
import { Link } from "wouter";
import type { Run } from "../api/client";
import { dateTime, duration, usd } from "../components/format";

/** A label and its value. */
export function Fact({ label, children }: { label: string; children: ReactNode }) {
  return (
    <Stack gap={0}>
      <Text size="xs" c="dimmed" tt="uppercase" fw={600}>
        {label}
      </Text>
      <div>{children}</div>
    </Stack>
  );
}

/** What a run was and cost: interaction, model, timing, tokens, cost, cache, source. */
export function RunFacts({ run, parent }: { run: Run; parent: ReactNode }) {
  const tokens = run.token_use;
  const cost = run.cost;
  return (
    <SimpleGrid cols={{ base: 2, md: 4 }} spacing="md" verticalSpacing="sm">
      <Fact label="Interaction">
        <Anchor component={Link} href={`/interactions/${run.interaction.id}`}>
          {run.interaction.name}
        </Anchor>
        {run.interaction.status && (
          <Text span size="xs" c="dimmed">
            {" "}
            ({run.interaction.status})
          </Text>
        )}
      </Fact>
      <Fact label="Environment">{run.environment.name || run.environment.id}</Fact>
      <Fact label="Model">
        <span className="mono">{run.modelId || "–"}</span>
      </Fact>
      <Fact label="Execution time">{duration(run.execution_time)}</Fact>
      <Fact label="Tokens">
        {tokens ? (
          <span data-testid="token-use">
            {tokens.total} ({tokens.prompt} prompt, {tokens.result} result)
          </span>
        ) : (
          "–"
        )}
      </Fact>
      <Fact label="Cost">
        {cost ? (
          <span title={`input ${usd(cost.input)}, output ${usd(cost.output)}`}>
            {usd(cost.total)} {cost.currency !== "USD" && cost.currency}
            {cost.estimated && (
              <Text span size="xs" c="dimmed">
                {" "}
                estimated
              </Text>
            )}
          </span>
        ) : (
          "–"
        )}
      </Fact>
      <Fact label="Cache">
        {run.cached ? (
          <span>
            hit
            {run.cached_from && (
              <>
                {" "}
                (from{" "}
                <Anchor component={Link} href={`/runs/${run.cached_from}`} className="mono">
                  {run.cached_from}
                </Anchor>
                )
              </>
            )}
          </span>
        ) : (
          "miss"
        )}
      </Fact>
      <Fact label="Settings">
        temperature {run.temperature ?? run.config.temperature ?? "–"}, max tokens{" "}
        {run.max_tokens ?? run.config.max_tokens ?? "–"}
        {run.stream ? ", streamed" : ""}
      </Fact>
      <Fact label="Created">{dateTime(run.created_at)}</Fact>
      <Fact label="Updated">{dateTime(run.updated_at)}</Fact>
      <Fact label="Source">
        {run.source ? (
          <span>
            {run.source.type}
            {run.source.label && ` · ${run.source.label}`} · {run.source.principal_type}{" "}
            <span className="mono">{run.source.principal_id}</span>
            {run.source.client_ip && ` · ${run.source.client_ip}`}
          </span>
        ) : (
          "–"
        )}
      </Fact>
      <Fact label="Parent">{parent}</Fact>
      <Fact label="Tags">
        {run.tags.length ? (
          <Group gap={4}>
            {run.tags.map((tag) => (
              <Badge key={tag} variant="outline" size="sm" tt="none" className="badge-whole">
                {tag}
              </Badge>
            ))}
          </Group>
        ) : (
          "–"
        )}
      </Fact>
    </SimpleGrid>
  );
}
