export { loadConfig, ConfigError, type Config } from './config.js';
export { LambdaDispatcher, dispatchBatch, type Dispatcher, type WorkerEvent } from './dispatch.js';
export { runWorker, requestWorkerShutdown, type WorkerDeps, type WorkerResult, type InvocationContext } from './worker.js';
export { runScheduler, type SchedulerResult } from './scheduler.js';
export { jsonLog, setLogSink, type Log } from './log.js';
export { runtimeDeps, resetRuntimeDeps, type RuntimeDeps } from './deps.js';
