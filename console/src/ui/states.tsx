import { Alert, Button, Group, Skeleton, Stack } from "@mantine/core";
import type { ReactNode } from "react";
import type { Loaded } from "./load";

/** A page's data: a skeleton while it loads, the API's message if it failed, else `children`. */
export function LoadState<T>({
  loaded,
  retry,
  children,
}: {
  loaded: Loaded<T>;
  retry?: () => void;
  children: (data: T) => ReactNode;
}) {
  if (loaded.state === "loading") {
    return (
      <Stack gap="xs" aria-busy="true" aria-label="Loading">
        <Skeleton height={28} />
        <Skeleton height={28} />
        <Skeleton height={28} />
      </Stack>
    );
  }
  if (loaded.state === "error") return <ErrorAlert message={loaded.message} retry={retry} />;
  return <>{children(loaded.data)}</>;
}

/** An error the API answered (its message), in an alert that screen readers announce. */
export function ErrorAlert({
  message,
  retry,
  title = "Something went wrong",
}: {
  message: string;
  retry?: () => void;
  title?: string;
}) {
  return (
    <Alert color="red" role="alert" title={title} data-testid="error">
      <Stack gap="xs">
        <span>{message}</span>
        {retry && (
          <Group>
            <Button size="xs" variant="light" color="red" onClick={retry}>
              Try again
            </Button>
          </Group>
        )}
      </Stack>
    </Alert>
  );
}
