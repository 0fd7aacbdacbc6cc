// The checks and items of a `lambda-invoke` start (./lambda-invoke.ts defines the job): the
// function must be invokable here, items come from params.items or from another job's expand.
// Loaded on a start's first use, so a worker's cold start does not carry it.
import type { ItemInput, ItemSource } from '../batch/types.js';
import { InvalidParamsError, UnknownJobError } from './errors.js';
import type { JobContext } from './job.js';
import type { LambdaInvokeParams } from './lambda-invoke-wire.js';

/**
 * A `lambda-invoke` start's items and the params its batch stores (the function, how its invokes
 * batch items, the callback; with `from`, the other job's stored params).
 * @throws {InvalidParamsError} the function is not invokable here, neither or both of `items` and
 * `from` are given, `bytesPerCall` without `itemsPerCall`, a key given twice, or `from` names
 * an unknown job or params it refuses.
 */
export async function expandLambdaInvoke(
  params: LambdaInvokeParams,
  ctx: JobContext,
): Promise<{ items: ItemSource; params: LambdaInvokeParams }> {
  const invokable = ctx.invokable ?? {};
  if (!Object.prototype.hasOwnProperty.call(invokable, params.functionName)) {
    const known = Object.keys(invokable);
    throw new InvalidParamsError(
      'params.functionName',
      `"${params.functionName}" is not an invokable function; ${
        known.length ? `invokable here: ${known.join(', ')}` : 'none is invokable here'
      } (the SST component's "invokable", LEASEHOLD_INVOKABLE; locally the app's "localFunctions")`,
    );
  }
  if ((params.items === undefined) === (params.from === undefined)) {
    throw new InvalidParamsError('params', 'give either "items" or "from"');
  }
  if (params.bytesPerCall !== undefined && params.itemsPerCall === undefined) {
    throw new InvalidParamsError('params.bytesPerCall', 'applies only with "itemsPerCall" (items batched into one invoke)');
  }
  // What the stored params keep besides the function: how its invokes batch items.
  const batching = {
    ...(params.itemsPerCall !== undefined ? { itemsPerCall: params.itemsPerCall } : {}),
    ...(params.bytesPerCall !== undefined ? { bytesPerCall: params.bytesPerCall } : {}),
    ...(params.callback !== undefined ? { callback: params.callback } : {}),
  };
  if (params.items) {
    const seen = new Set<string>();
    for (const [i, item] of params.items.entries()) {
      if (seen.has(item.key)) throw new InvalidParamsError(`params.items.${i}.key`, `"${item.key}" is given twice`);
      seen.add(item.key);
    }
    // The items become the batch's items; the stored params keep only what names the function.
    return {
      items: params.items.map((item): ItemInput => ({ key: item.key, input: item.input })),
      params: { functionName: params.functionName, ...batching },
    };
  }
  const from = params.from!;
  if (!ctx.expandJob) throw new InvalidParamsError('params.from', 'cannot take items from another job here');
  let inner: { items: ItemSource; params: unknown };
  try {
    inner = await ctx.expandJob(from.job, from.params);
  } catch (e) {
    if (e instanceof UnknownJobError) throw new InvalidParamsError('params.from.job', e.message);
    if (e instanceof InvalidParamsError)
      throw new InvalidParamsError(e.field.replace(/^params/, 'params.from.params'), e.message.slice(e.field.length + 2));
    throw e;
  }
  return {
    items: inner.items,
    params: { functionName: params.functionName, from: { job: from.job, params: inner.params }, ...batching },
  };
}
