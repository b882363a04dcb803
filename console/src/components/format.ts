/** Milliseconds as people read them. */
export function duration(ms: number | undefined): string {
  if (ms === undefined) return "–";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;
  const seconds = Math.round((ms % 60_000) / 1000);
  return `${Math.floor(ms / 60_000)} min${seconds ? ` ${seconds} s` : ""}`;
}

/** A date in the browser's locale and time zone. */
export function dateTime(iso: string | undefined): string {
  if (!iso) return "–";
  return new Date(iso).toLocaleString(undefined, {
    dateStyle: "short",
    timeStyle: "medium",
  });
}

/** USD amounts are small: enough digits to tell runs apart. */
export function usd(amount: number | undefined): string {
  if (amount === undefined) return "–";
  return `$${amount < 0.01 ? amount.toPrecision(2) : amount.toFixed(4)}`;
}
