/**
 * The package's public surface: run the service in-process, read its configuration, the client
 * library (management API, SDK settings, core gRPC clients), and the generated service contracts.
 */
export { loadConfig, ConfigError, type Config } from "./config.js";
export { startServer, type RunningServer, type ServeOptions } from "./server.js";
export { createAdminClient, resolveAdminTarget } from "./cli/admin-client.js";
export { startFakeProvider, type FakeProvider } from "./demo/fake-provider.js";
export { SvcClient, SvcApiError, createCoreClients, type SvcClientOptions } from "./client/svc-client.js";
export type * from "./client/types.js";
export * from "./gen/svc/auth/v1/auth_service_pb.js";
export * from "./gen/svc/common/v1/key_mode_pb.js";
export * from "./gen/svc/common/v1/project_limits_pb.js";
export * from "./gen/svc/limits/v1/limits_service_pb.js";
export * from "./gen/svc/proxy/v1/proxy_service_pb.js";
export * from "./gen/svc/telemetry/v1/telemetry_service_pb.js";
export * from "./gen/svc/cache/v1/cache_service_pb.js";
