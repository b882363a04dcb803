import type { Message } from "@bufbuild/protobuf";

/**
 * A message type's Connect JSON written by hand, for a hot path where protobuf-es's reflective
 * JSON codec costs more than the work around it (the executor's Execute: its request read, its
 * answer, a run, written). Either half may be missing. Both give way to protobuf-es on anything
 * they do not expect (answering undefined), so that what protobuf-es would refuse is refused with
 * its own message, and what it would take is taken the same way; their tests compare both with
 * protobuf-es's on a corpus and fail when the message gains a field they do not know.
 */
export interface JsonCodec<T extends Message = Message> {
  /**
   * The message of a request's JSON (parsed), as `fromJson(schema, json, { ignoreUnknownFields:
   * true })` makes it; undefined for protobuf-es to read it.
   */
  read?(json: unknown): T | undefined;
  /** The message as `toJsonString(schema, message)` writes it; undefined for protobuf-es to. */
  write?(message: T): string | undefined;
}

/** Codecs by the message's type name (`pies.executor.v1.ExecuteRequest`). */
export type JsonCodecs = ReadonlyMap<string, JsonCodec>;
