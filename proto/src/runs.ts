export * from "../gen/pies/runs/v1/run_pb.js";
export * from "../gen/pies/runs/v1/runs_service_pb.js";
