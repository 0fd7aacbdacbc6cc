// The span of a batched call (docs/design.md, "Traces"): a chunk of its own that src/batch/run/calls.ts
// imports only once a tracer provider is registered, so a worker that does not trace never reads it.
import type { Attributes } from '@opentelemetry/api';
import { tracing } from '../../tracing.js';
import type { BatchInfo } from '../types.js';

/**
 * `f`, one batched call of `n` items of `batch` to the job's `workMany`, in a client span
 * `call <job>` (a child of the active span) with the messaging attributes of a process of `n`
 * messages. Without a registered tracer provider, `f()`.
 */
export async function tracedCall<T>(batch: Pick<BatchInfo, 'id' | 'tenant' | 'job'>, n: number, f: () => Promise<T>): Promise<T> {
  const attributes: Attributes = {
    'messaging.system': 'leasehold',
    'messaging.operation.type': 'process',
    'messaging.destination.name': batch.job,
    'messaging.batch.message_count': n,
    'leasehold.batch.id': batch.id,
    'leasehold.tenant': batch.tenant,
  };
  const t = await tracing();
  return t ? t.traced(`call ${batch.job}`, attributes, f, 'client') : f();
}
