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
export { type UnitKey, type UnitView, type ProcessView, type ProcessRole, type InvocationPlan } from './sql.js';
export { fairShareOf, balanceOf, type Balance } from './share.js';
export {
  putTenantUnits,
  deleteTenantUnits,
  listUnits,
  listProcesses,
  getDesired,
  setDesired,
  planInvocations,
  readFleet,
  type Fleet,
  invocationLive,
  forgetInvocations,
} from './registry.js';
