import { Alert, Button, Group, TextInput } from "@mantine/core";
import { useEffect, useState, type FormEvent } from "react";
import { errorPosition } from "./search-request";

/** The Lucene query over the runs' input data; a query that does not parse shows where. */
export function QueryBox({
  query,
  error,
  onSearch,
}: {
  query: string;
  error?: string;
  onSearch: (query: string) => void;
}) {
  const [text, setText] = useState(query);
  useEffect(() => setText(query), [query]);
  const submit = (event: FormEvent) => {
    event.preventDefault();
    onSearch(text.trim());
  };
  const position = error ? errorPosition(error) : undefined;
  return (
    <form onSubmit={submit} role="search" aria-label="Runs">
      <Group align="flex-end" gap="xs" wrap="nowrap">
        <TextInput
          flex={1}
          label="Lucene query"
          description="Over the input data: name:Ada, lang:(en OR fr), -tag:x, amount:[1 TO 5]"
          placeholder="name:Ada AND lang:en"
          value={text}
          onChange={(event) => setText(event.currentTarget.value)}
          error={error ? true : undefined}
          classNames={{ input: "mono" }}
          spellCheck={false}
        />
        <Button type="submit">Search</Button>
      </Group>
      {error && (
        <Alert color="red" mt="xs" title="The query does not parse" data-testid="query-error">
          {error}
          {position !== undefined && (
            <pre className="query-caret" aria-hidden="true">
              {query}
              {"\n"}
              {" ".repeat(position)}^
            </pre>
          )}
        </Alert>
      )}
    </form>
  );
}
