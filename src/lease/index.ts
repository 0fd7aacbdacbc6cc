export {
  Leaser,
  leaseConfig,
  sweep,
  LEASE_DEFAULTS,
  LeaseConfigError,
  type LeaseConfig,
  type Hooks,
  type Reconciler,
  type Unit,
  type LeaserEvent,
} from './leaser.js';
export { type UnitKey, type UnitView, type ProcessView } from './sql.js';
export {
  putTenantUnits,
  deleteTenantUnits,
  listUnits,
  listProcesses,
  getDesired,
  setDesired,
  planInvocations,
  invocationLive,
  forgetInvocations,
} from './registry.js';
