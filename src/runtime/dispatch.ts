import type { LambdaClient } from '@aws-sdk/client-lambda';
import type { Dispatcher, WorkerEvent } from '../batch/index.js';
import { reserveInvocations } from '../lease/index.js';
import type { Sql } from '../store/index.js';
import type { Config } from './config.js';

/**
 * The `reserve` of a start (`StartDeps.reserve`): worker events for the batch ids given (one
 * per worker), reserved under the worker limit `config.maxWorkers` with the confirmation window
 * `config.invocationPendingMs` (docs/design.md, "Fan-out").
 */
export function workerReserver(
  sql: Sql,
  config: Pick<Config, 'maxWorkers' | 'invocationPendingMs'>,
): (batchIds: string[]) => Promise<WorkerEvent[]> {
  return (batchIds) =>
    reserveInvocations(sql, { batchIds, maxWorkers: config.maxWorkers, pendingMs: config.invocationPendingMs });
}

/**
 * Dispatches through the Lambda Invoke API as asynchronous (`Event`) invocations of the worker
 * function. The endpoint follows the SDK's configuration, so locally `AWS_ENDPOINT_URL_LAMBDA`
 * points it at the local invoke endpoint. `@aws-sdk/client-lambda` is loaded on the first
 * invoke, not when the function's code is (a worker that dispatches nothing never pays for it:
 * docs/design.md, "Serverless runtime"); the default client is created then too, with the SDK's
 * standard retries (3 attempts). A retry may deliver an event whose first try had landed: every
 * event names its invocation, which only one delivery can claim, so the retry's delivery is stale
 * (docs/design.md, "Late and repeated worker events").
 * @throws the SDK's error when the invoke is refused.
 */
export class LambdaDispatcher implements Dispatcher {
  private client: LambdaClient | undefined;

  constructor(
    private readonly functionName: string,
    client?: LambdaClient,
  ) {
    this.client = client;
  }

  async invoke(event: WorkerEvent): Promise<void> {
    const { InvokeCommand, LambdaClient } = await import('@aws-sdk/client-lambda');
    this.client ??= new LambdaClient({});
    const out = await this.client.send(
      new InvokeCommand({
        FunctionName: this.functionName,
        InvocationType: 'Event',
        Payload: new TextEncoder().encode(JSON.stringify(event)),
      }),
    );
    if (out.StatusCode !== 202) throw new Error(`invoke of ${this.functionName} answered ${out.StatusCode}`);
  }
}
