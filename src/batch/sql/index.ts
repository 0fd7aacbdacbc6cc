// The statements of batches, their items and their runs (leasehold_batches, leasehold_items,
// leasehold_runs and the locks of a start), one file per family: starts, reads, runs (takeover,
// recovery, beat, leave), moves (claim, step), ends (finish, cancel, give up, tolerance, wait
// state), dispatch, settings and the reads of a redrive; shared.ts holds the row mapping and the
// fence they share. This is the face src/batch uses (`import * as q from './sql/index.js'`); the
// other tables' statements (events, heartbeats, progress, rate, redrives, results, retention,
// sources, tenants) are imported from their own files.
//
// Each fenced statement changes rows only while the run named by `run` holds its lease: its row
// in leasehold_runs exists, locked by the statement (docs/design.md, "Fan-out"). Every end of a
// batch (cancel, finish, give-up, tolerance) deletes all its run rows first and writes its Batch
// Finished event last, in the same transaction (sql/events.ts), and every statement that changes
// both locks the run rows before the batch row (and the batch row before its tenant's row, in
// the trigger), so moves, takeovers and ends are ordered one after the other and never deadlock.
export * from './dispatch.js';
export * from './dispatch-claims.js';
export * from './ends.js';
export * from './moves.js';
export * from './reads.js';
export * from './redrive-reads.js';
export * from './runs.js';
export * from './settings.js';
export * from './shared.js';
export * from './starts.js';
export * from './steer.js';
