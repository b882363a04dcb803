import { Paper, Stack, Text, Title } from "@mantine/core";

/** A page that is not built yet (issue 27, phase 2). */
export function PlaceholderPage({ title, text }: { title: string; text?: string }) {
  return (
    <Stack>
      <Title order={1}>{title}</Title>
      <Paper withBorder p="lg">
        <Text>{text ?? "This page is coming in the next phase of the console."}</Text>
      </Paper>
    </Stack>
  );
}
