/** Largest value of a protobuf int32 and of a PostgreSQL `integer` column. */
export const INT32_MAX = 2_147_483_647;
