import { RunStatusSchema, RunStoreSchema } from "../gen/pies/runs/v1/run_pb.js";
import { AnchorDirectionSchema } from "../gen/pies/runs/v1/runs_service_pb.js";
import { enumNames } from "./enum-names.js";
export * from "../gen/pies/runs/v1/run_pb.js";
export * from "../gen/pies/runs/v1/runs_service_pb.js";

/** Run statuses by name (`created`, `processing`, `completed`, `failed`). */
export const runStatuses = enumNames(RunStatusSchema);

/** What the runs store keeps of a run, by name (`full`, `metadata`). */
export const runStores = enumNames(RunStoreSchema);

/** Anchor directions of a run listing by name (`after`, `before`). */
export const anchorDirections = enumNames(AnchorDirectionSchema);
