import {
  Alert,
  Button,
  Center,
  Container,
  Paper,
  PasswordInput,
  Stack,
  Text,
  Title,
} from "@mantine/core";
import { useState, type FormEvent } from "react";
import { useAuth } from "./session";
import { signIn } from "./sign-in";

/** Sign-in with an API key, exchanged at once for a token; the key is not kept. */
export function SignInPage({ pending, linkError }: { pending: boolean; linkError?: string }) {
  const { notice } = useAuth();
  const [key, setKey] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string>();

  const submit = (event: FormEvent) => {
    event.preventDefault();
    setBusy(true);
    setError(undefined);
    signIn(key).then(
      () => setKey(""),
      (err: unknown) => {
        setError((err as Error).message);
        setBusy(false);
      },
    );
  };

  const shown = error ?? linkError;
  return (
    <Container size={440} py="xl">
      <Center mb="lg">
        <Title order={1}>pies console</Title>
      </Center>
      <Paper withBorder p="lg" component="main">
        <form onSubmit={submit} aria-label="Sign in">
          <Stack>
            <Title order={2} size="h3">
              Sign in
            </Title>
            {notice && (
              <Alert color="yellow" role="status" data-testid="sign-in-notice">
                {notice}
              </Alert>
            )}
            {shown && (
              <Alert color="red" role="alert" data-testid="sign-in-error">
                {shown}
              </Alert>
            )}
            <PasswordInput
              label="API key"
              description="Exchanged for a short-lived token at once; the key is not stored."
              placeholder="sk-…"
              value={key}
              onChange={(event) => setKey(event.currentTarget.value)}
              autoComplete="off"
              required
              data-autofocus
            />
            <Button type="submit" loading={busy || pending} disabled={!key.trim()}>
              Sign in
            </Button>
            <Text size="sm" c="dimmed">
              <code>npm start</code> prints a sign-in link for the local key.
            </Text>
          </Stack>
        </form>
      </Paper>
    </Container>
  );
}
