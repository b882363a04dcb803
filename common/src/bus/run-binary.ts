import {
  fromBinary,
  ScalarType,
  toBinary,
  type DescField,
  type DescMessage,
  type Message,
} from "@bufbuild/protobuf";
import { BinaryReader, WireType } from "@bufbuild/protobuf/wire";
import { NO_JSON } from "../json-bytes.js";
import { upgradePayloads, written as writtenPayloads } from "../legacy-payloads.js";
import type { Timestamp } from "@bufbuild/protobuf/wkt";
import {
  RunSchema,
  RunStatus,
  RunStore,
  type Run,
  type RunAttempt,
  type RunCost,
  type RunConfig,
  type RunError,
  type RunPromptRef,
  type RunSource,
  type TokenUsage,
} from "@pies/proto/runs";

/**
 * `toBinary(RunSchema, run)`, the same bytes, written by hand for `pies.runs.v1.Run` and the
 * messages it holds (the record of every run is encoded once per put, and Connect's answer of a
 * blocking execution carries it again). protobuf-es encodes by reflection, chunk by chunk, with a
 * TextEncoder call per string; this writes into one reused buffer, a fraction of that
 * (docs/decisions/0014-record-put-without-reflection.md). Fields in number order, each written when set as protobuf-es
 * decides it (implicit presence: not the zero value; explicit: not undefined). Anything it does not
 * expect (a message with unknown fields, an integer out of int32 range, a non-string string) is
 * left to protobuf-es, which writes it or throws as before. run-binary.test.ts compares the bytes
 * with toBinary's and fails when Run or a message in it gains a field this does not know.
 */
export function encodeRun(run: Run): Uint8Array {
  // With the old payload fields too, while a rolling upgrade asks for them (protobuf-es writes those).
  writtenPayloads(RunSchema, run);
  const length = written(run);
  if (length === undefined) return toBinary(RunSchema, run);
  // A copy (a Buffer's slice would be a view of the buffer that the next encoding overwrites).
  const bytes = new Uint8Array(length);
  bytes.set(buf.subarray(0, length));
  release();
  return bytes;
}

/**
 * An answer that holds a run (ExecuteResponse, StartRunResponse, GetRunResponse and the like: a
 * Run field and bool or string fields), `toBinary`'s bytes with the run written by encodeRun: a
 * blocking execution's answer carries its run, which protobuf-es took ~35 µs to encode
 * (docs/decisions/0059-json-payloads-as-bytes.md). Undefined for any other message, for
 * protobuf-es to write.
 */
export function encodeRunAnswer(desc: DescMessage, message: Message): Uint8Array | undefined {
  const plan = answerPlanOf(desc);
  const m = message as unknown as Record<string, unknown> & { $unknown?: unknown[] };
  if (plan === null || (m.$unknown !== undefined && m.$unknown.length > 0)) return undefined;
  const parts: Uint8Array[] = [];
  for (const field of plan) {
    const v = m[field.localName];
    let part: Uint8Array | undefined;
    if (field.fieldKind === "message") {
      if (v === undefined) continue;
      const run = encodeRun(v as Run);
      part = concat(prefix(field.number, LEN, run.length), run);
    } else if (field.scalar === ScalarType.BOOL) {
      if (v === false) continue;
      if (v !== true) return undefined;
      part = prefix(field.number, VARINT, 1);
    } else {
      if (typeof v !== "string") return undefined;
      if (v === "") continue;
      const text = Buffer.from(v, "utf8");
      part = concat(prefix(field.number, LEN, text.length), text);
    }
    parts.push(part);
  }
  return concat(...parts);
}

/** The fields of an answer encodeRunAnswer writes, in number order; null when it does not. */
function answerPlan(desc: DescMessage): DescField[] | null {
  if (desc.oneofs.length > 0) return null;
  const fields = [...desc.fields].sort((a, b) => a.number - b.number);
  const runs = fields.filter((f) => f.fieldKind === "message" && f.message === RunSchema);
  const writable = fields.every(
    (f) =>
      (f.fieldKind === "message" && f.message === RunSchema) ||
      (f.fieldKind === "scalar" &&
        !f.proto.proto3Optional &&
        (f.scalar === ScalarType.BOOL || f.scalar === ScalarType.STRING)),
  );
  return writable && runs.length === 1 ? fields : null;
}

const answerPlans = new Map<DescMessage, DescField[] | null>();

/** answerPlan's, made once per message type. */
function answerPlanOf(desc: DescMessage): DescField[] | null {
  let plan = answerPlans.get(desc);
  if (plan === undefined) {
    plan = answerPlan(desc);
    answerPlans.set(desc, plan);
  }
  return plan;
}

/** A tag and, for a length-delimited field, its length (a bool's value 1 otherwise). */
function prefix(no: number, wireType: number, n: number): Uint8Array {
  const out: number[] = [];
  const push = (v: number) => {
    while (v > 0x7f) {
      out.push((v & 0x7f) | 0x80);
      v >>>= 7;
    }
    out.push(v);
  };
  push((no << 3) | wireType);
  push(n);
  return Uint8Array.from(out);
}

function concat(...parts: Uint8Array[]): Uint8Array {
  let length = 0;
  for (const p of parts) length += p.length;
  const out = new Uint8Array(length);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/**
 * A run stored by `encodeRun` (a record, a stream's end), by this release or one before it (its
 * payloads in the old Struct/Value fields: legacy-payloads.ts).
 */
export function decodeStoredRun(bytes: Uint8Array): Run {
  return upgradePayloads(RunSchema, decodeRun(bytes));
}

/**
 * An answer that holds a run (encodeRunAnswer's), `fromBinary`'s message with the run read by
 * decodeRun; undefined for any other message, or anything unexpected, for protobuf-es to read.
 */
export function decodeRunAnswer<T extends Message>(
  desc: DescMessage,
  bytes: Uint8Array,
): T | undefined {
  const plan = answerPlanOf(desc);
  if (plan === null) return undefined;
  const answer: Record<string, unknown> = { $typeName: desc.typeName };
  for (const field of plan) {
    if (field.fieldKind === "scalar")
      answer[field.localName] = field.scalar === ScalarType.BOOL ? false : "";
  }
  try {
    const r = new BinaryReader(bytes);
    while (r.pos < r.len) {
      const [no, wt] = r.tag();
      const field = plan.find((f) => f.number === no);
      if (!field) return undefined;
      if (field.fieldKind === "message") {
        if (answer[field.localName] !== undefined) return undefined;
        const to = endOf(r, wt);
        answer[field.localName] = decodeRun(bytes.subarray(r.pos, to));
        r.pos = to;
      } else if (field.scalar === ScalarType.BOOL) {
        wire(wt, WireType.Varint);
        answer[field.localName] = r.bool();
      } else {
        answer[field.localName] = text(r, wt);
      }
    }
  } catch {
    return undefined;
  }
  return answer as T;
}

/**
 * The length of `encodeRun(run)`, without the copy of its bytes (a size check keeps nothing of
 * them).
 */
export function encodedRunLength(run: Run): number {
  writtenPayloads(RunSchema, run);
  const length = written(run);
  if (length === undefined) return toBinary(RunSchema, run).length;
  release();
  return length;
}

/**
 * `run` written at the start of the buffer: the length of its bytes there, or undefined when
 * protobuf-es should write it.
 */
function written(run: Run): number | undefined {
  pos = 0;
  try {
    writeRun(run);
  } catch (err) {
    if (err !== UNEXPECTED) throw err;
    pos = 0;
    return undefined;
  }
  return pos;
}

/** Once the bytes are taken: a huge record (a prompt of megabytes) does not keep its buffer. */
function release() {
  if (buf.length > MAX_KEPT) buf = Buffer.allocUnsafe(INITIAL);
}

/** Thrown (and caught in `written`) when protobuf-es should write the message instead. */
const UNEXPECTED = Symbol("unexpected");
const INT64_MAX = 2n ** 63n - 1n;
const INT64_MIN = -(2n ** 63n);

const INITIAL = 16 * 1024;
const MAX_KEPT = 1024 * 1024;
let buf = Buffer.allocUnsafe(INITIAL);
let pos = 0;

function ensure(n: number) {
  if (pos + n <= buf.length) return;
  let size = buf.length * 2;
  while (size < pos + n) size *= 2;
  const grown = Buffer.allocUnsafe(size);
  buf.copy(grown, 0, 0, pos);
  buf = grown;
}

/** An unsigned varint below 2^32 (tags, lengths, non-negative int32). */
function varint(v: number) {
  ensure(5);
  while (v > 0x7f) {
    buf[pos++] = (v & 0x7f) | 0x80;
    v >>>= 7;
  }
  buf[pos++] = v;
}

const tag = (no: number, wireType: number) => varint((no << 3) | wireType);

const VARINT = 0;
const BIT64 = 1;
const LEN = 2;

function int32(no: number, v: number) {
  if (!Number.isInteger(v) || v > 0x7fffffff || v < -0x80000000) throw UNEXPECTED;
  tag(no, VARINT);
  if (v >= 0) return varint(v);
  // Negative: sign-extended to 64 bits, ten bytes (as protobuf-es's varint32write).
  ensure(10);
  for (let i = 0; i < 9; i++) {
    buf[pos++] = (v & 127) | 128;
    v >>= 7;
  }
  buf[pos++] = 1;
}

function int64(no: number, v: bigint) {
  // Out of int64's range: toBinary throws, where asUintN would wrap it.
  if (typeof v !== "bigint" || v > INT64_MAX || v < INT64_MIN) throw UNEXPECTED;
  tag(no, VARINT);
  ensure(10);
  let u = BigInt.asUintN(64, v);
  if (u <= 0xffffffffn) return varint(Number(u));
  while (u > 0x7fn) {
    buf[pos++] = Number(u & 0x7fn) | 0x80;
    u >>= 7n;
  }
  buf[pos++] = Number(u);
}

function double(no: number, v: number) {
  if (typeof v !== "number") throw UNEXPECTED;
  tag(no, BIT64);
  ensure(8);
  pos = buf.writeDoubleLE(v, pos);
}

function bool(no: number) {
  tag(no, VARINT);
  ensure(1);
  buf[pos++] = 1;
}

function string(no: number, s: string) {
  if (typeof s !== "string") throw UNEXPECTED;
  tag(no, LEN);
  // At most three bytes of UTF-8 per UTF-16 unit (a surrogate pair is four for two).
  const most = s.length * 3;
  if (most < 128) {
    ensure(1 + most);
    const at = pos++;
    const n = buf.write(s, pos, "utf8");
    buf[at] = n;
    pos += n;
    return;
  }
  const n = Buffer.byteLength(s, "utf8");
  varint(n);
  ensure(n);
  pos += buf.write(s, pos, "utf8");
}

function bytes(no: number, b: Uint8Array) {
  if (!(b instanceof Uint8Array)) throw UNEXPECTED;
  tag(no, LEN);
  varint(b.length);
  ensure(b.length);
  buf.set(b, pos);
  pos += b.length;
}

/** Starts a length-delimited message: one byte kept for its length (moved over if it needs more). */
function open(no: number): number {
  tag(no, LEN);
  ensure(1);
  return pos++;
}

function close(at: number) {
  const len = pos - at - 1;
  if (len < 0x80) {
    buf[at] = len;
    return;
  }
  let size = 1;
  while (len >>> (7 * size) !== 0) size++;
  ensure(size - 1);
  buf.copyWithin(at + size, at + 1, pos);
  pos += size - 1;
  let v = len;
  let i = at;
  while (v > 0x7f) {
    buf[i++] = (v & 0x7f) | 0x80;
    v >>>= 7;
  }
  buf[i] = v;
}

/** Unknown fields kept from a decoded message: protobuf-es writes them back. */
function known(message: { $unknown?: unknown[] }) {
  if (message.$unknown !== undefined && message.$unknown.length > 0) throw UNEXPECTED;
}

function writeRun(r: Run) {
  known(r);
  if (r.id !== "") string(1, r.id);
  if (r.projectId !== "") string(2, r.projectId);
  if (r.accountId !== "") string(3, r.accountId);
  if (r.interactionId !== "") string(4, r.interactionId);
  if (r.interactionName !== "") string(5, r.interactionName);
  if (r.environmentId !== "") string(6, r.environmentId);
  if (r.environmentName !== "") string(7, r.environmentName);
  if (r.modelId !== "") string(8, r.modelId);
  if (r.status !== 0) int32(9, r.status);
  if (r.stream) bool(10);
  // The old payload fields (a message on its way to an old reader, legacy-payloads.ts) are
  // protobuf-es's to write.
  if (
    r.parameters !== undefined ||
    r.result !== undefined ||
    r.prompt !== undefined ||
    r.cachePolicy !== undefined ||
    r.resultSchema !== undefined
  )
    throw UNEXPECTED;
  for (const t of r.tags) string(14, t);
  if (r.config !== undefined) config(15, r.config);
  if (r.source !== undefined) source(16, r.source);
  if (r.tokenUse !== undefined) tokenUsage(17, r.tokenUse);
  if (r.executionTime !== undefined) int64(18, r.executionTime);
  if (r.error !== undefined) runError(19, r.error);
  if (r.ttl !== 0) int32(20, r.ttl);
  if (r.parentId !== "") string(21, r.parentId);
  if (r.provider !== "") string(24, r.provider);
  if (r.cached) bool(25);
  if (r.createdAt !== undefined) timestamp(26, r.createdAt);
  if (r.updatedAt !== undefined) timestamp(27, r.updatedAt);
  for (const a of r.attempts) attempt(28, a);
  if (r.cachedFrom !== "") string(29, r.cachedFrom);
  if (r.cacheKey !== "") string(30, r.cacheKey);
  if (r.interactionStatus !== "") string(31, r.interactionStatus);
  for (const p of r.interactionPrompts) promptRef(32, p);
  if (r.interactionUpdatedAt !== undefined) timestamp(33, r.interactionUpdatedAt);
  if (r.projectName !== "") string(34, r.projectName);
  if (r.accountName !== "") string(35, r.accountName);
  if (r.parametersJson.length > 0) bytes(36, r.parametersJson);
  if (r.resultJson.length > 0) bytes(37, r.resultJson);
  if (r.promptJson.length > 0) bytes(38, r.promptJson);
  if (r.cachePolicyJson.length > 0) bytes(39, r.cachePolicyJson);
  if (r.resultSchemaJson.length > 0) bytes(40, r.resultSchemaJson);
  if (r.cost !== undefined) runCost(41, r.cost);
  if (r.store !== 0) int32(42, r.store);
}

function runCost(no: number, c: RunCost) {
  known(c);
  const at = open(no);
  if (c.input !== 0) double(1, c.input);
  if (c.output !== 0) double(2, c.output);
  if (c.total !== 0) double(3, c.total);
  if (c.currency !== "") string(4, c.currency);
  if (c.estimated) bool(5);
  close(at);
}

function promptRef(no: number, p: RunPromptRef) {
  known(p);
  const at = open(no);
  if (p.id !== "") string(1, p.id);
  if (p.type !== "") string(2, p.type);
  if (p.templateId !== "") string(3, p.templateId);
  if (p.chatPath !== "") string(4, p.chatPath);
  close(at);
}

function config(no: number, c: RunConfig) {
  known(c);
  const at = open(no);
  if (c.environmentId !== "") string(1, c.environmentId);
  if (c.model !== "") string(2, c.model);
  if (c.formatter !== "") string(3, c.formatter);
  if (c.temperature !== undefined) double(4, c.temperature);
  if (c.maxTokens !== undefined) int32(5, c.maxTokens);
  if (c.maxRepairs !== undefined) int32(6, c.maxRepairs);
  close(at);
}

function source(no: number, s: RunSource) {
  known(s);
  const at = open(no);
  if (s.type !== "") string(1, s.type);
  if (s.label !== "") string(2, s.label);
  if (s.principalType !== "") string(3, s.principalType);
  if (s.principalId !== "") string(4, s.principalId);
  if (s.clientIp !== "") string(5, s.clientIp);
  close(at);
}

function tokenUsage(no: number, u: TokenUsage) {
  known(u);
  const at = open(no);
  if (u.prompt !== 0) int32(1, u.prompt);
  if (u.result !== 0) int32(2, u.result);
  if (u.total !== 0) int32(3, u.total);
  close(at);
}

function runError(no: number, e: RunError) {
  known(e);
  const at = open(no);
  if (e.code !== "") string(1, e.code);
  if (e.message !== "") string(2, e.message);
  if (e.data !== undefined) throw UNEXPECTED;
  if (e.dataJson.length > 0) bytes(4, e.dataJson);
  close(at);
}

function attempt(no: number, a: RunAttempt) {
  known(a);
  const at = open(no);
  if (a.number !== 0) int32(1, a.number);
  if (a.promptAdded !== undefined) throw UNEXPECTED;
  if (a.error !== undefined) runError(3, a.error);
  if (a.tokenUse !== undefined) tokenUsage(4, a.tokenUse);
  if (a.promptAddedJson.length > 0) bytes(5, a.promptAddedJson);
  if (a.environmentId !== "") string(6, a.environmentId);
  if (a.model !== "") string(7, a.model);
  if (a.durationMs !== 0) int32(8, a.durationMs);
  close(at);
}

function timestamp(no: number, t: Timestamp) {
  known(t);
  const at = open(no);
  if (t.seconds !== 0n) int64(1, t.seconds);
  if (t.nanos !== 0) int32(2, t.nanos);
  close(at);
}

/**
 * `create(RunSchema)`, written out: protobuf-es builds its messages field by field from their
 * descriptor, and V8 keeps such an object as a dictionary, so that each later read of a field (the
 * record's encoding, endedRun's copy; docs/decisions/0013-per-call-costs-cut.md) is a hash
 * lookup; an object literal is of its fast kind. The executor's runs start from it, and decodeRun
 * fills it. services/executor/src/prepare.test.ts checks that it is create(RunSchema)'s zero
 * run, field for field.
 */
export function zeroRun(): Run {
  return {
    $typeName: "pies.runs.v1.Run",
    id: "",
    projectId: "",
    accountId: "",
    interactionId: "",
    interactionName: "",
    environmentId: "",
    environmentName: "",
    modelId: "",
    status: RunStatus.UNSPECIFIED,
    stream: false,
    tags: [],
    ttl: 0,
    parentId: "",
    provider: "",
    cached: false,
    attempts: [],
    cachedFrom: "",
    cacheKey: "",
    interactionStatus: "",
    interactionPrompts: [],
    projectName: "",
    accountName: "",
    parametersJson: NO_JSON,
    resultJson: NO_JSON,
    promptJson: NO_JSON,
    cachePolicyJson: NO_JSON,
    resultSchemaJson: NO_JSON,
    store: RunStore.UNSPECIFIED,
  };
}

/**
 * `fromBinary(RunSchema, bytes)`, the same message, read by hand: the gateway decodes the run of
 * every execution it answers, and protobuf-es's reflective decoding of it was a quarter of the
 * gateway's CPU per execution (docs/decisions/0059-json-payloads-as-bytes.md). Fields in any
 * order; anything it does not read exactly as protobuf-es does (an unknown field, which protobuf-es
 * keeps; a singular message given twice, which it merges; the old payload fields; a wire type other
 * than the field's; invalid UTF-8, which it refuses) goes to fromBinary, which decodes or throws as
 * before. run-binary.test.ts compares the two on random runs and fails when Run or a message in it
 * gains a field this does not read.
 */
export function decodeRun(bytes: Uint8Array): Run {
  return readRunBytes(bytes) ?? fromBinary(RunSchema, bytes);
}

/** The hand-written reader alone: undefined when the run is protobuf-es's to read. */
export function readRunBytes(bytes: Uint8Array): Run | undefined {
  try {
    return readRun(new BinaryReader(bytes), bytes.length);
  } catch {
    return undefined;
  }
}

/** Length-delimited: where the field ends. */
function endOf(r: BinaryReader, wireType: WireType): number {
  if (wireType !== WireType.LengthDelimited) throw UNEXPECTED;
  const to = r.uint32() + r.pos;
  if (to > r.len) throw UNEXPECTED;
  return to;
}

function wire(wireType: WireType, expected: WireType) {
  if (wireType !== expected) throw UNEXPECTED;
}

const text = (r: BinaryReader, wt: WireType) => (
  wire(wt, WireType.LengthDelimited),
  r.string(true)
);
const blob = (r: BinaryReader, wt: WireType) => (wire(wt, WireType.LengthDelimited), r.bytes());
const i32 = (r: BinaryReader, wt: WireType) => (wire(wt, WireType.Varint), r.int32());
const i64 = (r: BinaryReader, wt: WireType) => (wire(wt, WireType.Varint), BigInt(r.int64()));
const f64 = (r: BinaryReader, wt: WireType) => (wire(wt, WireType.Bit64), r.double());

function readRun(r: BinaryReader, to: number): Run {
  const run = zeroRun();

  while (r.pos < to) {
    const [no, wt] = r.tag();
    switch (no) {
      case 1:
        run.id = text(r, wt);
        break;
      case 2:
        run.projectId = text(r, wt);
        break;
      case 3:
        run.accountId = text(r, wt);
        break;
      case 4:
        run.interactionId = text(r, wt);
        break;
      case 5:
        run.interactionName = text(r, wt);
        break;
      case 6:
        run.environmentId = text(r, wt);
        break;
      case 7:
        run.environmentName = text(r, wt);
        break;
      case 8:
        run.modelId = text(r, wt);
        break;
      case 9:
        run.status = i32(r, wt);
        break;
      case 10:
        wire(wt, WireType.Varint);
        run.stream = r.bool();
        break;
      case 14:
        run.tags.push(text(r, wt));
        break;
      case 15:
        if (run.config) throw UNEXPECTED;
        run.config = readConfig(r, endOf(r, wt));
        break;
      case 16:
        if (run.source) throw UNEXPECTED;
        run.source = readSource(r, endOf(r, wt));
        break;
      case 17:
        if (run.tokenUse) throw UNEXPECTED;
        run.tokenUse = readUsage(r, endOf(r, wt));
        break;
      case 18:
        run.executionTime = i64(r, wt);
        break;
      case 19:
        if (run.error) throw UNEXPECTED;
        run.error = readError(r, endOf(r, wt));
        break;
      case 20:
        run.ttl = i32(r, wt);
        break;
      case 21:
        run.parentId = text(r, wt);
        break;
      case 24:
        run.provider = text(r, wt);
        break;
      case 25:
        wire(wt, WireType.Varint);
        run.cached = r.bool();
        break;
      case 26:
        if (run.createdAt) throw UNEXPECTED;
        run.createdAt = readTimestamp(r, endOf(r, wt));
        break;
      case 27:
        if (run.updatedAt) throw UNEXPECTED;
        run.updatedAt = readTimestamp(r, endOf(r, wt));
        break;
      case 28:
        run.attempts.push(readAttempt(r, endOf(r, wt)));
        break;
      case 29:
        run.cachedFrom = text(r, wt);
        break;
      case 30:
        run.cacheKey = text(r, wt);
        break;
      case 31:
        run.interactionStatus = text(r, wt);
        break;
      case 32:
        run.interactionPrompts.push(readPromptRef(r, endOf(r, wt)));
        break;
      case 33:
        if (run.interactionUpdatedAt) throw UNEXPECTED;
        run.interactionUpdatedAt = readTimestamp(r, endOf(r, wt));
        break;
      case 34:
        run.projectName = text(r, wt);
        break;
      case 35:
        run.accountName = text(r, wt);
        break;
      case 36:
        run.parametersJson = blob(r, wt);
        break;
      case 37:
        run.resultJson = blob(r, wt);
        break;
      case 38:
        run.promptJson = blob(r, wt);
        break;
      case 39:
        run.cachePolicyJson = blob(r, wt);
        break;
      case 40:
        run.resultSchemaJson = blob(r, wt);
        break;
      case 41:
        if (run.cost) throw UNEXPECTED;
        run.cost = readCost(r, endOf(r, wt));
        break;
      case 42:
        run.store = i32(r, wt);
        break;
      // The old payload fields (11, 12, 13, 22, 23) and unknown ones: protobuf-es's.
      default:
        throw UNEXPECTED;
    }
  }
  if (r.pos !== to) throw UNEXPECTED;
  return run;
}

function readConfig(r: BinaryReader, to: number): RunConfig {
  const c: RunConfig = {
    $typeName: "pies.runs.v1.RunConfig",
    environmentId: "",
    model: "",
    formatter: "",
  };
  while (r.pos < to) {
    const [no, wt] = r.tag();
    if (no === 1) c.environmentId = text(r, wt);
    else if (no === 2) c.model = text(r, wt);
    else if (no === 3) c.formatter = text(r, wt);
    else if (no === 4) c.temperature = f64(r, wt);
    else if (no === 5) c.maxTokens = i32(r, wt);
    else if (no === 6) c.maxRepairs = i32(r, wt);
    else throw UNEXPECTED;
  }
  if (r.pos !== to) throw UNEXPECTED;
  return c;
}

function readSource(r: BinaryReader, to: number): RunSource {
  const s: RunSource = {
    $typeName: "pies.runs.v1.RunSource",
    type: "",
    label: "",
    principalType: "",
    principalId: "",
    clientIp: "",
  };
  while (r.pos < to) {
    const [no, wt] = r.tag();
    if (no === 1) s.type = text(r, wt);
    else if (no === 2) s.label = text(r, wt);
    else if (no === 3) s.principalType = text(r, wt);
    else if (no === 4) s.principalId = text(r, wt);
    else if (no === 5) s.clientIp = text(r, wt);
    else throw UNEXPECTED;
  }
  if (r.pos !== to) throw UNEXPECTED;
  return s;
}

function readCost(r: BinaryReader, to: number): RunCost {
  const c: RunCost = {
    $typeName: "pies.runs.v1.RunCost",
    input: 0,
    output: 0,
    total: 0,
    currency: "",
    estimated: false,
  };
  while (r.pos < to) {
    const [no, wt] = r.tag();
    if (no === 1) c.input = f64(r, wt);
    else if (no === 2) c.output = f64(r, wt);
    else if (no === 3) c.total = f64(r, wt);
    else if (no === 4) c.currency = text(r, wt);
    else if (no === 5) {
      wire(wt, WireType.Varint);
      c.estimated = r.bool();
    } else throw UNEXPECTED;
  }
  if (r.pos !== to) throw UNEXPECTED;
  return c;
}

function readUsage(r: BinaryReader, to: number): TokenUsage {
  const u: TokenUsage = { $typeName: "pies.runs.v1.TokenUsage", prompt: 0, result: 0, total: 0 };
  while (r.pos < to) {
    const [no, wt] = r.tag();
    if (no === 1) u.prompt = i32(r, wt);
    else if (no === 2) u.result = i32(r, wt);
    else if (no === 3) u.total = i32(r, wt);
    else throw UNEXPECTED;
  }
  if (r.pos !== to) throw UNEXPECTED;
  return u;
}

function readError(r: BinaryReader, to: number): RunError {
  const e: RunError = {
    $typeName: "pies.runs.v1.RunError",
    code: "",
    message: "",
    dataJson: NO_JSON,
  };
  while (r.pos < to) {
    const [no, wt] = r.tag();
    if (no === 1) e.code = text(r, wt);
    else if (no === 2) e.message = text(r, wt);
    else if (no === 4) e.dataJson = blob(r, wt);
    else throw UNEXPECTED;
  }
  if (r.pos !== to) throw UNEXPECTED;
  return e;
}

function readTimestamp(r: BinaryReader, to: number): Timestamp {
  const t: Timestamp = { $typeName: "google.protobuf.Timestamp", seconds: 0n, nanos: 0 };
  while (r.pos < to) {
    const [no, wt] = r.tag();
    if (no === 1) t.seconds = i64(r, wt);
    else if (no === 2) t.nanos = i32(r, wt);
    else throw UNEXPECTED;
  }
  if (r.pos !== to) throw UNEXPECTED;
  return t;
}

function readAttempt(r: BinaryReader, to: number): RunAttempt {
  const a: RunAttempt = {
    $typeName: "pies.runs.v1.RunAttempt",
    number: 0,
    promptAddedJson: NO_JSON,
    environmentId: "",
    model: "",
    durationMs: 0,
  };
  while (r.pos < to) {
    const [no, wt] = r.tag();
    if (no === 1) a.number = i32(r, wt);
    else if (no === 3) {
      if (a.error) throw UNEXPECTED;
      a.error = readError(r, endOf(r, wt));
    } else if (no === 4) {
      if (a.tokenUse) throw UNEXPECTED;
      a.tokenUse = readUsage(r, endOf(r, wt));
    } else if (no === 5) a.promptAddedJson = blob(r, wt);
    else if (no === 6) a.environmentId = text(r, wt);
    else if (no === 7) a.model = text(r, wt);
    else if (no === 8) a.durationMs = i32(r, wt);
    else throw UNEXPECTED;
  }
  if (r.pos !== to) throw UNEXPECTED;
  return a;
}

function readPromptRef(r: BinaryReader, to: number): RunPromptRef {
  const p: RunPromptRef = {
    $typeName: "pies.runs.v1.RunPromptRef",
    id: "",
    type: "",
    templateId: "",
    chatPath: "",
  };
  while (r.pos < to) {
    const [no, wt] = r.tag();
    if (no === 1) p.id = text(r, wt);
    else if (no === 2) p.type = text(r, wt);
    else if (no === 3) p.templateId = text(r, wt);
    else if (no === 4) p.chatPath = text(r, wt);
    else throw UNEXPECTED;
  }
  if (r.pos !== to) throw UNEXPECTED;
  return p;
}
