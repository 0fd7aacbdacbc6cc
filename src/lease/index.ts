export {
  Leaser,
  leaseConfig,
  sweep,
  LEASE_DEFAULTS,
  LeaseConfigError,
  ProcessIdInUseError,
  type LeaseConfig,
  type Hooks,
  type Reconciler,
  type Unit,
  type LeaserEvent,
} from './leaser.js';
export { type UnitKey, type ProcessRole, type ProcessChain } from './sql/ownership.js';
export { fairShareOf, sharesOf, starvingBelow, balanceOf, type Balance, type Shares } from './share.js';
export { putTenantUnits, listUnits } from './units.js';
export { deleteTenantUnits, listProcesses, type UnitView, type ProcessView } from './sql/units.js';
export { releaseUnit, liftQuarantines, UnitNotFoundError } from './units.js';
export { setDesired, readFleet, type Fleet } from './fleet.js';
export {
  getDesired,
  planInvocations,
  reserveInvocations,
  invocationLive,
  forgetInvocations,
  workerStart,
  NO_WORKER_LIMIT,
  type InvocationPlan,
  type BatchInvocation,
  type WorkerStart,
} from './sql/fleet.js';
