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
 * Written against SST v4; SST's own types are not needed (its globals are read loosely). Every
 * name is listed on purpose (docs/design.md, "Layout"): the component, its arguments and the
 * shapes they take, `databaseFromEnv`, and the event names an app's own rules match;
 * test/package/exports.test.ts pins the list.
 * @packageDocumentation
 */
export type { LeaseholdArgs, LeaseholdConstructor, LeaseholdTransforms, InvokableFunction, Permission } from './args.js';
export { Leasehold } from './component.js';
export { EVENT_SOURCE, BATCH_FINISHED_DETAIL_TYPE, START_BATCH_DETAIL_TYPE } from '../src/contract.js';
export {
  databaseFromEnv,
  PRODUCTION_STAGES,
  type ConnectionBudget,
  type ExistingDatabase,
  type ExistingNetwork,
  type FinalStatus,
  type FunctionSettings,
  type NewNetwork,
  type RdsDatabase,
  type RuleDeclaration,
  type ScheduleDeclaration,
  type Settings,
  type SettingsOptions,
  type WorkerSettings,
} from './settings.js';
export type { Input, Output, Transform, ResourceOptions, FunctionLike } from './platform.js';
