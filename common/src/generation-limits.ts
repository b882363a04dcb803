import { invalid } from "./connect-errors.js";

/** The sampling temperatures a model accepts (OpenAI's range). */
export const TEMPERATURE_RANGE = { min: 0, max: 2 } as const;

/** The smallest cap on a completion's tokens. */
export const MIN_MAX_TOKENS = 1;

/**
 * Checks a temperature and token cap against the limits above (the gateway's schemas use the same
 * constants): INVALID_ARGUMENT naming the field otherwise; undefined means unset and passes.
 */
export function checkGenerationSettings(settings: {
  temperature?: number | undefined;
  maxTokens?: number | undefined;
}): void {
  const { temperature, maxTokens } = settings;
  if (
    temperature !== undefined &&
    (temperature < TEMPERATURE_RANGE.min || temperature > TEMPERATURE_RANGE.max)
  ) {
    throw invalid(
      `temperature must be between ${TEMPERATURE_RANGE.min} and ${TEMPERATURE_RANGE.max}`,
    );
  }
  if (maxTokens !== undefined && maxTokens < MIN_MAX_TOKENS) {
    throw invalid(`max_tokens must be at least ${MIN_MAX_TOKENS}`);
  }
}
