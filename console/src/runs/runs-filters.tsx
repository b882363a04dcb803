import { Button, Group, MultiSelect, Select, TextInput } from "@mantine/core";
import { api } from "../api/client";
import { useApi } from "../components/use-api";
import { RANGES, type RunsView } from "./runs-view";

type Field = "interaction" | "environment" | "model" | "tag";

/** The values runs have for a field (`GET /runs/filter-options/:field`), named where they can be. */
function useOptions(field: Field) {
  const loaded = useApi(
    () => api.GET("/api/v1/runs/filter-options/{field}", { params: { path: { field } } }),
    [field],
  );
  return (loaded.data ?? []).map((o) => ({ value: o.id, label: o.name || o.id }));
}

/** Status, interaction, model, environment, tags and time range, as in `POST /runs/search`. */
export function RunsFilters({
  view,
  onChange,
}: {
  view: RunsView;
  onChange: (change: Partial<RunsView>) => void;
}) {
  const interactions = useOptions("interaction");
  const environments = useOptions("environment");
  const models = useOptions("model");
  const tags = useOptions("tag");
  const withCurrent = (options: { value: string; label: string }[], current?: string) =>
    current && !options.some((o) => o.value === current)
      ? [...options, { value: current, label: current }]
      : options;
  const range = view.range ?? (view.from || view.to ? "custom" : "all");
  return (
    <Group gap="sm" align="flex-end">
      <Select
        label="Status"
        w={140}
        clearable
        data={["created", "processing", "completed", "failed"]}
        value={view.status ?? null}
        onChange={(status) => onChange({ status: status ?? undefined })}
      />
      <Select
        label="Interaction"
        w={200}
        clearable
        searchable
        data={withCurrent(interactions, view.interaction)}
        value={view.interaction ?? null}
        onChange={(interaction) => onChange({ interaction: interaction ?? undefined })}
      />
      <Select
        label="Model"
        w={180}
        clearable
        searchable
        data={withCurrent(models, view.model)}
        value={view.model ?? null}
        onChange={(model) => onChange({ model: model ?? undefined })}
      />
      <Select
        label="Environment"
        w={180}
        clearable
        data={withCurrent(environments, view.environment)}
        value={view.environment ?? null}
        onChange={(environment) => onChange({ environment: environment ?? undefined })}
      />
      <MultiSelect
        label="Tags"
        miw={180}
        maw={320}
        clearable
        searchable
        data={[...new Set([...tags.map((t) => t.value), ...view.tags])]}
        value={view.tags}
        onChange={(next) => onChange({ tags: next })}
      />
      <Select
        label="Time"
        w={170}
        allowDeselect={false}
        data={[
          { value: "all", label: "All time" },
          ...Object.entries(RANGES).map(([value, r]) => ({ value, label: r.label })),
          { value: "custom", label: "Custom" },
        ]}
        value={range}
        onChange={(next) => {
          if (next === "all") onChange({ range: undefined, from: undefined, to: undefined });
          else if (next === "custom") {
            onChange({
              range: undefined,
              from: view.from ?? new Date(Date.now() - 86_400_000).toISOString(),
              to: view.to,
            });
          } else onChange({ range: next ?? undefined, from: undefined, to: undefined });
        }}
      />
      {range === "custom" && (
        <>
          <TextInput
            label="From"
            type="datetime-local"
            value={local(view.from)}
            onChange={(e) => onChange({ from: iso(e.currentTarget.value) })}
          />
          <TextInput
            label="To"
            type="datetime-local"
            value={local(view.to)}
            onChange={(e) => onChange({ to: iso(e.currentTarget.value) })}
          />
        </>
      )}
      <TextInput
        label="Cost from (USD)"
        w={130}
        type="number"
        min={0}
        step="any"
        value={view.minCost ?? ""}
        onChange={(e) => onChange({ minCost: e.currentTarget.value || undefined })}
      />
      <TextInput
        label="Cost to (USD)"
        w={130}
        type="number"
        min={0}
        step="any"
        value={view.maxCost ?? ""}
        onChange={(e) => onChange({ maxCost: e.currentTarget.value || undefined })}
      />
      <Button
        variant="default"
        onClick={() =>
          onChange({
            q: "",
            status: undefined,
            interaction: undefined,
            model: undefined,
            environment: undefined,
            tags: [],
            range: undefined,
            from: undefined,
            to: undefined,
            minCost: undefined,
            maxCost: undefined,
          })
        }
      >
        Clear all
      </Button>
    </Group>
  );
}

/** An ISO date as a datetime-local input's value (the browser's time zone). */
function local(value: string | undefined): string {
  if (!value) return "";
  const date = new Date(value);
  if (Number.isNaN(date.getTime())) return "";
  return new Date(date.getTime() - date.getTimezoneOffset() * 60_000).toISOString().slice(0, 16);
}

function iso(value: string): string | undefined {
  return value ? new Date(value).toISOString() : undefined;
}
