import { Badge } from "@mantine/core";

const COLORS: Record<string, string> = {
  completed: "green",
  failed: "red",
  processing: "blue",
  created: "gray",
  // An experiment's, and its pairs'.
  running: "blue",
  pending: "gray",
  cancelled: "orange",
};

/** A run's or an experiment's status. */
export function StatusBadge({ status }: { status: string }) {
  return (
    <Badge color={COLORS[status] ?? "gray"} variant="light" className="badge-whole">
      {status}
    </Badge>
  );
}
