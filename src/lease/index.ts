// Process membership and unit ownership (docs/design.md, "Process membership and unit ownership").
//
// Owns the tables leasehold_processes, leasehold_units, leasehold_unit_totals,
// leasehold_invocations and leasehold_settings (the desired count and the worker limit).
// Keeps invariants 1 (a process acts on a unit only while it owns it), 11 (a process id is never
// reused), 12 (shares converge; a stable membership moves nothing), 13 (the live count follows
// the desired count) and the worker half of 14 (live workers plus invocations on their way never
// exceed the worker limit). Entry points: `Leaser` (heartbeat, claim, shed, release), `sweep`,
// `setDesired` / `readFleet`, `planInvocations` / `reserveInvocations`, and the unit registry
// (`putTenantUnits`, `listUnits`). Uses only the store.
export {
  Leaser,
  leaseConfig,
  LEASE_DEFAULTS,
  LeaseConfigError,
  ProcessIdInUseError,
  type LeaseConfig,
  type Hooks,
  type Reconciler,
  type Unit,
  type LeaserEvent,
} from './leaser.js';
export { sweep } from './sweep.js';
export { type UnitKey, type ProcessRole, type ProcessChain } from './sql/ownership.js';
export { fairShareOf, sharesOf, starvingBelow, balanceOf, type Balance, type Shares } from './share.js';
export { putTenantUnits, listUnits } from './units.js';
export { deleteTenantUnits, listProcesses, type UnitView, type ProcessView } from './sql/units.js';
export { releaseUnit, liftQuarantines, UnitNotFoundError } from './units.js';
export { setDesired, readFleet, type Fleet } from './fleet.js';
export { getDesired, forgetInvocations } from './sql/fleet-size.js';
export {
  planInvocations,
  reserveInvocations,
  invocationLive,
  workerStart,
  NO_WORKER_LIMIT,
  type InvocationPlan,
  type BatchInvocation,
  type WorkerStart,
} from './sql/fleet.js';
