export * from "../gen/pies/experiments/v1/experiments_service_pb.js";
