export { loadConfig, parseInvokable, ConfigError, type Config, type DbConfig } from './config.js';
export { LambdaDispatcher } from './dispatch.js';
export {
  runWorker,
  requestWorkerShutdown,
  type WorkerDeps,
  type WorkerResult,
  type InvocationContext,
  type UnitReconciler,
} from './worker.js';
export { runScheduler, type SchedulerResult } from './scheduler.js';
export { jsonLog, setLogSink, lambdaLog, powertoolsLogger, writeLogLine } from './log.js';
export { createRuntime, resetRuntimeDeps, type AppJobs, type Runtime, type RuntimeDeps } from './deps.js';
export {
  openDatabase,
  databaseTarget,
  dbTls,
  iamTokenPassword,
  rdsCertificateAuthorities,
  settleAfterThaw,
  isConnectionError,
  isConnectionRefused,
  retryRefusedConnection,
  type RefusedRetryOptions,
  type IamTokenTarget,
  type OpenDatabaseOptions,
  type SignerCredentials,
  type TlsOptions,
} from './db.js';
export { ReconnectingLeaser } from './heartbeat.js';
export {
  metricsFor,
  workerMetricHooks,
  recordFleetBalance,
  recordRetention,
  recordRuns,
  METRICS_NAMESPACE,
  type RuntimeMetrics,
  type WorkerHooks,
} from './metrics.js';
export {
  invocation,
  invocationOf,
  httpErrorBoundary,
  type Invocation,
  type InvocationOptions,
  type LeaseholdContext,
} from './middleware.js';
export {
  workerInvocation,
  schedulerInvocation,
  apiInvocation,
  triggerInvocation,
  migrateInvocation,
  type MigrateResult,
} from './handlers.js';
