export * from "../gen/pies/catalog/v1/resources_pb.js";
export * from "../gen/pies/catalog/v1/catalog_service_pb.js";
