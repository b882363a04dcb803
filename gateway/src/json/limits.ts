import { z } from "zod";
import { INT32_MAX, PAGE_SIZE } from "@pies/common";

/** The configurable limits on what a request may carry (GatewayOptions, from the config). */
export interface InputLimits {
  /**
   * Longest name, id, model id, tag, label or other identifying string, in UTF-16 code units
   * (PIES_MAX_NAME_LENGTH). These land in indexed columns, whose entries PostgreSQL caps at
   * about 2,700 bytes.
   */
  maxNameLength: number;
}

/**
 * An identifying string (name, id, model, tag, label…), at most PIES_MAX_NAME_LENGTH long. The
 * message names the limit; the field is named by the path that toHttpError puts in front.
 */
export const shortText = (limits: InputLimits) =>
  z
    .string()
    .max(
      limits.maxNameLength,
      `must be at most ${limits.maxNameLength} characters long (PIES_MAX_NAME_LENGTH)`,
    );

/** Room for a version selector after an interaction's name: `@` and up to 10 digits. */
const SELECTOR_LENGTH = `@${INT32_MAX}`.length;

/** An interaction's id, or its name with an optional selector (`Name`, `Name@3`, `Name@latest`). */
export const interactionRef = (limits: InputLimits) =>
  z
    .string()
    .min(1)
    .max(
      limits.maxNameLength + SELECTOR_LENGTH,
      `must be a name of at most ${limits.maxNameLength} characters (PIES_MAX_NAME_LENGTH) and an @version`,
    );

/** A list of identifying strings: an array, or one string of comma-separated items. */
export const shortTextList = (limits: InputLimits) =>
  z
    .union([z.string(), z.array(z.string())])
    .transform((v) =>
      typeof v === "string"
        ? v
            .split(",")
            .map((s) => s.trim())
            .filter(Boolean)
        : v,
    )
    .pipe(z.array(shortText(limits)));

const rangeMessage = (min: number, max: number) => `must be an integer from ${min} to ${max}`;

const integerIn = (number: z.ZodNumber, min: number, max: number) =>
  number
    .int(rangeMessage(min, max))
    .min(min, rangeMessage(min, max))
    .max(max, rangeMessage(min, max));

/** An integer that fits the int32 fields and `integer` columns it ends up in. */
export const int32 = (min: number, max = INT32_MAX) =>
  integerIn(z.number({ invalid_type_error: rangeMessage(min, max) }), min, max);

/** int32 from a query string parameter (`?offset=10`). */
export const queryInt32 = (min: number, max = INT32_MAX) =>
  integerIn(z.coerce.number({ invalid_type_error: rangeMessage(min, max) }), min, max);

/**
 * `?limit=&offset=` of a list route, with the services' page sizes (PAGE_SIZE): other query
 * parameters pass through for the route's own schema to `.extend` this one.
 */
export const pageQuery = z
  .object({
    limit: queryInt32(1, PAGE_SIZE.max).default(PAGE_SIZE.default),
    offset: queryInt32(0).default(0),
  })
  .passthrough();
