export * from "../gen/pies/executor/v1/executor_service_pb.js";
