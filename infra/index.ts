/**
 * `leasehold/sst`: the `Leasehold` SST component, for `run()` of an app's sst.config.ts.
 *
 * ```ts
 * async run() {
 *   const { Leasehold } = await import('leasehold/sst');
 *   const runner = new Leasehold('Runner', { handlers: 'src/leasehold' });
 *   return { api: runner.url, bus: runner.busName, worker: runner.workerName };
 * }
 * ```
 * Written against SST v4; SST's own types are not needed (its globals are read loosely).
 * @packageDocumentation
 */
export {
  Leasehold,
  API_ROUTES,
  COMPONENT_TYPE,
  type LeaseholdArgs,
  type LeaseholdConstructor,
  type LeaseholdTransforms,
  type InvokableFunction,
  type Permission,
} from './component.js';
export {
  databaseFromEnv,
  estimatedMaxConnections,
  resolveSettings,
  checkSettings,
  checkSchedules,
  checkRules,
  rulesPattern,
  EVENT_SOURCE,
  BATCH_FINISHED_DETAIL_TYPE,
  type RuleDeclaration,
  type FinalStatus,
  scheduleEvent,
  functionName,
  isProduction,
  PRODUCTION_STAGES,
  RUNTIME,
  START_BATCH_DETAIL_TYPE,
  SCHEDULE_SOURCE,
  type ScheduleDeclaration,
  type Settings,
  type SettingsOptions,
  type RdsDatabase,
  type ExistingDatabase,
  type ExistingNetwork,
  type NewNetwork,
  type WorkerSettings,
  type FunctionSettings,
  type ConnectionBudget,
} from './settings.js';
export type { Input, Output, Transform, ResourceOptions, FunctionLike } from './platform.js';
