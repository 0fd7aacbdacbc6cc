// The fleet's balance and the runs of open batches, read for the metrics (docs/design.md,
// "Serverless runtime", "Fan-out").
import { runsSummary } from '../../batch/index.js';
import { balanceOf, LEASE_DEFAULTS, readFleet, type Balance } from '../../lease/index.js';
import type { MaintenanceService } from './service.js';

/** What the balance reads; the scheduler passes its `config.lease`'s. */
export interface BalanceSettings {
  /** Below `1 − shedHysteresis` of the fair share a process counts as starving. */
  shedHysteresis: number;
}

/** The balance's settings when none are given. */
export const BALANCE_DEFAULTS: Readonly<BalanceSettings> = {
  /** @defaultValue `LEASE_DEFAULTS.shedHysteresis` (0.2) */
  shedHysteresis: LEASE_DEFAULTS.shedHysteresis,
};

/** What the balance read. */
export interface BalancePart {
  /**
   * The fleet after this run, as its process rows say (weights as of each process's last
   * heartbeat): fair share, spread and starving processes (below `starvingBelow`
   * of the fair share) of the live fleet processes not retiring, and the processes retiring and
   * sent for batches.
   */
  balance: Balance & { fairShare: number; retiring: number; batch: number };
  /**
   * The runs of open batches after this run's dispatch (docs/design.md, "Fan-out"): batches
   * with a live run, live runs in all, the most of one batch.
   */
  runs: { batches: number; runs: number; maxPerBatch: number };
}

/** Read the fleet's balance from the process rows, and the runs of open batches; changes nothing. */
export function balanceService(settings: Partial<BalanceSettings> = {}): MaintenanceService<'balance', BalancePart> {
  const s = { ...BALANCE_DEFAULTS, ...settings };
  return {
    name: 'balance',
    run: async ({ sql }) => {
      const fleet = await readFleet(sql);
      const balance = {
        ...balanceOf(fleet.reportedWeights, fleet.fairShare, s.shedHysteresis),
        fairShare: fleet.fairShare,
        retiring: fleet.retiring,
        batch: fleet.batch,
      };
      return { balance, runs: await runsSummary(sql) };
    },
  };
}
