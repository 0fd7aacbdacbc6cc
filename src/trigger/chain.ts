// Chaining (docs/design.md, "Events"): rules that start a batch when another batch ends. A rule
// names the job (and the statuses) it follows; the Batch Finished event's stable id, with the
// rule's name, is the request key of the batch it starts, so a redelivered event (the sender's
// at-least-once resend, EventBridge's own retry) starts nothing new.
import * as z from '../zod.js';
import { MAX_CONCURRENCY, type ToleratedFailures } from '../batch/types.js';
import { MAX_NAME_LENGTH, nameSchema, steerMsSchema, toleratedFailuresSchema } from '../batch/input-fields.js';
import type { BatchFinishedDetail } from '../batch/sql/events.js';
import { InvalidSettingError } from '../errors.js';

/** How a batch may end, as `after.status` names it. */
export const FINAL_STATUSES = ['succeeded', 'failed', 'cancelled'] as const;

/** A final status of a batch. */
export type FinalStatus = (typeof FINAL_STATUSES)[number];

/**
 * A rule that starts a batch of `job` when a batch of `after.job` ends with one of
 * `after.status` (default `succeeded`), optionally only for `after.tenant`. The new batch
 * belongs to `tenant` and `datasource` (default: those of the batch that ended), with the
 * rule's `params` plus `after` (see {@link chainedParams}).
 */
export interface ChainRule {
  /** Unique, lowercase letters, digits and `-`, at most 48 characters; part of the request key. */
  name: string;
  after: { job: string; status: FinalStatus[]; tenant?: string };
  job: string;
  tenant?: string;
  datasource?: string;
  params: Record<string, unknown>;
  toleratedFailures?: ToleratedFailures;
  maxConcurrency?: number;
  /**
   * Not started this many ms after the batch it follows finished (deferred at `maxOpen`, or its
   * event late), the chained start is dropped with a reason (docs/design.md, "Pause, deadline and
   * startBy"). Default none.
   */
  startByMs?: number;
}

const statusSchema = z.enum(FINAL_STATUSES, { error: () => `must be one of ${FINAL_STATUSES.join(', ')}` });

const ruleSchema = z.strictObject({
  name: z.string().check(z.regex(/^[a-z0-9][a-z0-9-]{0,47}$/, 'lowercase letters, digits and -, at most 48')),
  after: z.strictObject({
    job: z.string().check(z.minLength(1), z.maxLength(MAX_NAME_LENGTH)),
    status: z.optional(z.union([statusSchema, z.array(statusSchema).check(z.minLength(1))])),
    tenant: z.optional(nameSchema),
  }),
  job: z.string().check(z.minLength(1), z.maxLength(MAX_NAME_LENGTH)),
  tenant: z.optional(nameSchema),
  datasource: z.optional(nameSchema),
  params: z.optional(z.record(z.string(), z.unknown())),
  toleratedFailures: z.optional(toleratedFailuresSchema),
  maxConcurrency: z.optional(z.number().check(z.int(), z.gte(1), z.lte(MAX_CONCURRENCY))),
  startByMs: z.optional(steerMsSchema),
});

/**
 * Read chain rules (`LEASEHOLD_RULES`: the JSON array the SST component writes from its `rules`,
 * and `leasehold dev` from the app file's `rules` export): each `{ name, after: { job, status?,
 * tenant? }, job, tenant?, datasource?, params?, toleratedFailures?, maxConcurrency?, startByMs? }`, names
 * unique. `status` may be one status or a list; default `["succeeded"]`. Empty or unset: none.
 * @throws {InvalidSettingError} not JSON, not an array, or a rule that does not parse (the
 *   message names the rule and the field).
 */
export function parseChainRules(value: string | readonly unknown[] | undefined): ChainRule[] {
  if (value === undefined || (typeof value === 'string' && value.trim() === '')) return [];
  let list: unknown;
  if (typeof value === 'string') {
    try {
      list = JSON.parse(value);
    } catch (e) {
      throw new InvalidSettingError('rules', `not JSON (${(e as Error).message})`);
    }
  } else list = value;
  if (!Array.isArray(list)) throw new InvalidSettingError('rules', 'must be a JSON array of rules');
  const seen = new Set<string>();
  return list.map((raw, i) => {
    const r = ruleSchema.safeParse(raw);
    if (!r.success) {
      const issue = r.error.issues[0];
      const name = (raw as { name?: unknown } | null)?.name;
      throw new InvalidSettingError(
        'rules',
        `rules[${i}]${typeof name === 'string' ? ` ("${name}")` : ''}.${issue.path.join('.') || '(rule)'}: ${issue.message}`,
      );
    }
    if (seen.has(r.data.name)) throw new InvalidSettingError('rules', `rules[${i}]: the name "${r.data.name}" is used twice`);
    seen.add(r.data.name);
    const status = r.data.after.status;
    const { toleratedFailures, ...rest } = r.data;
    return {
      ...rest,
      ...(toleratedFailures ? { toleratedFailures } : {}),
      after: {
        job: r.data.after.job,
        status: status === undefined ? ['succeeded'] : Array.isArray(status) ? status : [status],
        ...(r.data.after.tenant !== undefined ? { tenant: r.data.after.tenant } : {}),
      },
      params: r.data.params ?? {},
    };
  });
}

/** The rules a batch's end matches: its job, its status, and the rule's tenant when it names one. */
export function matchingRules(rules: readonly ChainRule[], detail: BatchFinishedDetail): ChainRule[] {
  return rules.filter(
    (r) =>
      r.after.job === detail.job &&
      (r.after.status as string[]).includes(detail.status) &&
      (r.after.tenant === undefined || r.after.tenant === detail.tenant),
  );
}

/** The request key of the batch `rule` starts after the event `eventId`: `after:<rule>:<event id>`. */
export function chainedRequestKey(rule: ChainRule, eventId: string): string {
  return `after:${rule.name}:${eventId}`;
}

/**
 * The params of a chained batch: the rule's, plus `after`, what ended — `{ eventId, batchId,
 * tenant, datasource, job, requestKey, status, counts, results }` — unless the rule's params
 * set `after` themselves.
 */
export function chainedParams(rule: ChainRule, detail: BatchFinishedDetail): Record<string, unknown> {
  const after = {
    eventId: detail.id,
    batchId: detail.batchId,
    tenant: detail.tenant,
    datasource: detail.datasource,
    job: detail.job,
    requestKey: detail.requestKey,
    status: detail.status,
    counts: detail.counts,
    results: detail.results ?? null,
  };
  return { after, ...rule.params };
}
