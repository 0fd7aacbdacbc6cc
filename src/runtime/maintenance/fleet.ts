// The fleet's invocations: workers invoked to reach the desired count of live processes, or
// the surplus asked to retire (docs/design.md, "Serverless runtime").
import type { Log } from '../../log.js';
import type { MaintenanceService } from './service.js';

/** What the fleet's invocations read; the scheduler passes its config's. */
export interface FleetSettings {
  /** The most workers one scheduler run invokes. */
  invokeCap: number;
}

/** The fleet's settings when none are given. */
export const FLEET_DEFAULTS: Readonly<FleetSettings> = {
  /** @defaultValue 10 (`LEASEHOLD_INVOKE_CAP`) */
  invokeCap: 10,
};

/** What the fleet's invocations did. */
export interface FleetPart {
  /** Desired count, live processes and invocations not yet live, as the plan saw them. */
  fleet: { desired: number; live: number; pending: number };
  /** Workers invoked to reach the desired count of live processes. */
  invoked: number;
  /** Live fleet processes asked to retire now (the fleet was above the desired count). */
  retired: number;
  /**
   * Invocations (fleet or batch) whose confirmation window passed since the last decision
   * without their worker's first heartbeat: `invocations` in all, `unstarted` of them never
   * claimed by a worker (the platform accepted the invoke and never ran it).
   */
  unconfirmed: { invocations: number; unstarted: number };
}

/**
 * Invoke `desired − live − coming` workers (coming: invoked within the confirmation window and
 * not yet heartbeating), at most `invokeCap` and within the worker limit, or ask exactly the
 * surplus of live fleet processes to retire — decided one scheduler at a time, so overlapping
 * runs never over-invoke or over-retire (`WorkerDispatcher.sendFleet`). Nothing is invoked when no unit
 * has weight > 0 and no open batch is below its target (scale to zero). A failed invoke is not
 * thrown: it counts as coming until its confirmation window passes, then is planned again.
 * Invocations whose window passed unconfirmed are reported in `unconfirmed`, with a warning
 * (docs/deploy.md, "Faults and how leasehold answers them": a worker function throttled to zero
 * answers every invoke 202 and runs none). They spend no attempt and stall no batch: no run
 * started, so no item was claimed and no batch counts a stalled run.
 */
export function fleetService(settings: Partial<FleetSettings> = {}): MaintenanceService<'fleet', FleetPart> {
  const s = { ...FLEET_DEFAULTS, ...settings };
  return {
    name: 'fleet',
    run: async ({ workers, log }) => {
      // A failed invoke counts as coming until its confirmation window passes; then planned again.
      const { plan, invoked } = await workers.sendFleet(s.invokeCap);
      const unconfirmed = { invocations: plan.expired.unconfirmed, unstarted: plan.expired.unstarted };
      if (unconfirmed.invocations > 0) warnUnconfirmed(log, unconfirmed);
      return {
        fleet: { desired: plan.desired, live: plan.live, pending: plan.pending },
        invoked,
        retired: plan.retired.length,
        unconfirmed,
      };
    },
  };
}

// One line per scheduler run that found invocations unconfirmed: the platform is not running the
// workers it accepted (reserved concurrency 0, an account limit) or they die before their first
// heartbeat.
function warnUnconfirmed(log: Log | undefined, u: { invocations: number; unstarted: number }): void {
  const why =
    u.unstarted > 0
      ? 'no worker started for some: is the worker function throttled (reserved concurrency 0)?'
      : 'their workers started and died before their first heartbeat';
  log?.('warn', `invocations not confirmed: ${u.invocations} sent within their window got no heartbeat; ${why}`, u);
}
