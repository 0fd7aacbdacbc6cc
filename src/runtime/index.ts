// The serverless runtime (docs/design.md, "Serverless runtime", "Database connections", "Logs and metrics").
//
// Owns no table: it wires the domain to Lambda. Keeps invariant 6 (a worker invocation returns
// before its deadline, owning nothing) and 13 (the scheduler keeps the live count at the desired
// count), and reads every setting once, at the edge (`loadConfig`, docs/configuration.md).
// Entry points: `createRuntime` (configuration, database, dispatcher per container), `runWorker`,
// `runScheduler`, the middy middlewares (`invocation`), and the handlers `createHandlers`
// (src/lambda.ts) wraps. Used by src/lambda.ts and local mode; uses the API, the trigger and the domain.
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
  loadRdsCertificateAuthorities,
  prepareDatabase,
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
  recordUnconfirmed,
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
