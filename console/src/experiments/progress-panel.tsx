import { Progress, Text } from "@mantine/core";
import { progressParts, progressText } from "./experiment-view";
import type { Progress as ProgressCounts } from "./model";

const COLORS = { completed: "green", failed: "red", running: "blue", cancelled: "gray" } as const;

/** The pairs done, failed, running and cancelled, as one bar, and the counts in words. */
export function ProgressBar({
  progress,
  size = "lg",
  live,
  label = "Progress",
}: {
  progress: ProgressCounts;
  label?: string;
  size?: "sm" | "lg";
  /** Announce changes (the experiment's page; not each line of a list). */
  live?: boolean;
}) {
  const parts = progressParts(progress);
  return (
    <>
      <Progress.Root size={size} aria-label={label} data-testid="progress-bar">
        {parts.map((part) => (
          <Progress.Section
            key={part.key}
            value={part.percent}
            color={COLORS[part.key]}
            striped={part.key === "running"}
            animated={part.key === "running"}
            aria-label={`${part.count} ${part.label}`}
            title={`${part.count} ${part.label}`}
          />
        ))}
      </Progress.Root>
      {live !== undefined && (
        <Text size="sm" data-testid="progress-text" aria-live={live ? "polite" : undefined}>
          {progressText(progress)}
        </Text>
      )}
    </>
  );
}
