/**
 * The package's public surface: run the service in-process, read its configuration, and the
 * generated service contracts for typed gRPC/Connect clients.
 */
export { loadConfig, ConfigError, type Config } from "./config.js";
export { startServer, type RunningServer, type ServeOptions } from "./server.js";
export { createAdminClient, resolveAdminTarget } from "./cli/admin-client.js";
export { startFakeProvider, type FakeProvider } from "./demo/fake-provider.js";
export * from "./gen/svc/auth/v1/auth_service_pb.js";
export * from "./gen/svc/common/v1/key_mode_pb.js";
export * from "./gen/svc/proxy/v1/proxy_service_pb.js";
