import type { LambdaClient } from '@aws-sdk/client-lambda';
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
 * points it at the local invoke endpoint. `@aws-sdk/client-lambda` is loaded on the first
 * invoke, not when the function's code is (a worker that dispatches nothing never pays for it:
 * docs/design.md, "Serverless runtime"); the default client is created then too.
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

/** Record the dispatch of `batchId` and send it to a worker. */
export async function dispatchBatch(sql: Sql, dispatcher: Dispatcher, batchId: string): Promise<void> {
  await markDispatched(sql, batchId);
  await dispatcher.invoke({ batchId });
}
