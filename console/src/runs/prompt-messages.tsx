import { Badge, Paper, Stack } from "@mantine/core";

interface Message {
  role?: string;
  content?: unknown;
}

/** The prompt as sent to the model: a string, or messages with a role each. */
export function PromptMessages({ prompt }: { prompt: unknown }) {
  if (typeof prompt === "string") return <pre className="message-content">{prompt}</pre>;
  const messages: Message[] = Array.isArray(prompt) ? (prompt as Message[]) : [];
  return (
    <Stack gap="xs" data-testid="prompt-messages">
      {messages.map((message, i) => (
        <Paper key={i} withBorder p="sm">
          <Badge variant="light" color={message.role === "system" ? "grape" : "blue"} mb={6}>
            {message.role ?? "message"}
          </Badge>
          <pre className="message-content">
            {typeof message.content === "string"
              ? message.content
              : JSON.stringify(message.content, null, 2)}
          </pre>
        </Paper>
      ))}
    </Stack>
  );
}
