// Unit jobs (docs/design.md, "Two kinds of work": units; "Outbox"): recurring work per owned (tenant, shard).
//
// Owns the tables leasehold_outbox, leasehold_outbox_deliveries, leasehold_outbox_endpoints and
// leasehold_outbox_pauses (the outbox; message ids are bigints, read and written as decimal text),
// and the unit jobs' rows in leasehold_units. Keeps invariant 1 for a unit job's
// writes (each is fenced on the process still owning the unit) and 7 (one endpoint's faults stop
// no other). Entry points: `defineUnitJob`, `UnitJobRegistry`, `UnitRunner` (runs the unit jobs
// of owned units), `outboxDelivery` / `enqueueOutbox`, `EndpointGuard`,
// `deleteDeliveredOutboxMessages`. Uses jobs, leases and the store.
import { type UnitJob, UnitJobRegistry } from './job.js';
import { outboxDeliveryJob } from './outbox-delivery.js';
export {
  EndpointGuard,
  EndpointRefusedError,
  parseOutboxAllow,
  addressRefusal,
  hostRefusal,
  OUTBOX_ALLOW_VARIABLE,
  type EndpointGuardOptions,
  type OutboxAllowList,
  type AddressLookup,
} from './endpoint-guard.js';

export { defineUnitJob, UnitJobRegistry, type UnitJob, type UnitContext, type Fence, type ConfigIssue } from './job.js';
export { UnitRunner, type UnitRunnerOptions } from './runner.js';
export {
  outboxDelivery,
  outboxDeliveryJob,
  outboxConfigSchema,
  outboxShard,
  idempotencyKey,
  NoOutboxUnitsError,
  OUTBOX_JOB,
  MAX_ENDPOINTS,
  ASSIGN_BATCH,
  MAX_RETRY_AFTER_MS,
  type OutboxConfig,
  type OutboxDeliveryOptions,
  type OutboxDeliveryBody,
} from './outbox-delivery.js';
export { enqueueOutbox, markDelivered, outboxStatus, type OutboxStatus, type OutboxEndpointStatus } from './outbox.js';

/** Unit jobs shipped with leasehold: `outbox-delivery` with default settings. */
export const builtinUnitJobs: UnitJob<unknown>[] = [outboxDeliveryJob as UnitJob<unknown>];

/**
 * A registry of the built-in unit jobs, with `outbox-delivery` replaced by `outbox` when given
 * (for other settings), plus `extra`.
 * @throws {Error} two jobs share a name.
 */
export function defaultUnitJobs(options: { outbox?: UnitJob<unknown>; extra?: UnitJob<unknown>[] } = {}): UnitJobRegistry {
  const builtins = options.outbox ? [options.outbox] : builtinUnitJobs;
  return new UnitJobRegistry([...builtins, ...(options.extra ?? [])]);
}

export { postWebhook, postWebhookAnswer, signWebhook, type WebhookPost, type WebhookAnswer } from './webhook.js';
export { deleteDeliveredOutboxMessages, type OutboxRetentionOptions, type OutboxRetentionResult } from './retention.js';
