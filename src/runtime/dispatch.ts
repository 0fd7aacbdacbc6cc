import { InvokeCommand, LambdaClient } from '@aws-sdk/client-lambda';
import { markDispatched } from '../batch/index.js';
import type { Sql } from '../store/index.js';

/** The event a worker invocation receives. */
export interface WorkerEvent {
  /** A batch to run first. */
  batchId?: string;
  /** Set by the scheduler: this invocation counts as coming until its process is live. */
  invocationId?: string;
}

/** Sends batches to worker invocations. */
export interface Dispatcher {
  /** Ask for one worker invocation that runs `batchId` (or just looks for work when omitted). */
  invoke(event: WorkerEvent): Promise<void>;
}

/**
 * Dispatches through the Lambda Invoke API as asynchronous (`Event`) invocations of the worker
 * function. The endpoint follows the SDK's configuration, so locally `AWS_ENDPOINT_URL_LAMBDA`
 * points it at the local invoke endpoint.
 * @throws the SDK's error when the invoke is refused.
 */
export class LambdaDispatcher implements Dispatcher {
  constructor(
    private readonly functionName: string,
    private readonly client: LambdaClient = new LambdaClient({}),
  ) {}

  async invoke(event: WorkerEvent): Promise<void> {
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

/** Record the dispatch of `batchId` and send it to a worker. */
export async function dispatchBatch(sql: Sql, dispatcher: Dispatcher, batchId: string): Promise<void> {
  await markDispatched(sql, batchId);
  await dispatcher.invoke({ batchId });
}
