/**
 * The request-log engine at the tests' own priority. Its default, nice 10, gives it a tenth of the
 * CPU a busy machine's other work gets (CI runners are busy), and log reads and the engine's close
 * at shutdown then take seconds beyond what the tests allow. Only its own test (chdb-process) is
 * about the nice value; the others are about the gateway.
 */
export const TEST_ENGINE = { SVC_TELEMETRY_ENGINE_NICE: "0" } as const;
