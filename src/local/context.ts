import { randomUUID } from 'node:crypto';
import type { ClientContext, Context } from 'aws-lambda';

/**
 * The context a local invocation receives: the `aws-lambda` `Context` type, so handlers wrapped
 * with middy typecheck unchanged.
 */
export type LambdaLikeContext = Context;

/** What local drivers read the time from; `Date.now()` by default. Structurally a batch `Clock`. */
export interface NowClock {
  /** Milliseconds since the epoch. */
  now(): number;
}

/** Options of {@link createLambdaContext}. */
export interface LambdaContextOptions {
  /** Function name, also used in the ARN and log names. */
  functionName: string;
  /** The invocation's timeout; `getRemainingTimeInMillis()` counts down from it. */
  timeoutMs: number;
  /** When the invocation started, in epoch ms. Default `clock.now()` at creation. */
  startedAtMs?: number;
  /** Default a fresh UUID. */
  awsRequestId?: string;
  /** Default `AWS_REGION`, else `us-east-1`. */
  region?: string;
  /** Default `000000000000`. */
  accountId?: string;
  /** Default 1024. */
  memoryLimitInMB?: number;
  /** Decoded `X-Amz-Client-Context`, when the caller sent one. */
  clientContext?: ClientContext;
  /** Default the system clock. */
  clock?: NowClock;
}

/** The system clock. */
export const systemNow: NowClock = { now: () => Date.now() };

/**
 * Build a Lambda-like context for one local invocation. `getRemainingTimeInMillis()` is
 * `startedAtMs + timeoutMs − now`, never below 0, which is what a worker uses to stop before its
 * deadline (invariant 6 (docs/design.md)). The deprecated `done`/`succeed`/`fail` throw: local
 * handlers must return a promise.
 */
export function createLambdaContext(options: LambdaContextOptions): LambdaLikeContext {
  const clock = options.clock ?? systemNow;
  const startedAtMs = options.startedAtMs ?? clock.now();
  const region = options.region ?? process.env.AWS_REGION ?? 'us-east-1';
  const accountId = options.accountId ?? '000000000000';
  const name = options.functionName;
  const day = new Date(startedAtMs).toISOString().slice(0, 10).replaceAll('-', '/');
  const callbackStyle = (): never => {
    throw new Error('callback-style completion (done/succeed/fail) is not supported locally: return a promise');
  };
  return {
    callbackWaitsForEmptyEventLoop: true,
    functionName: name,
    functionVersion: '$LATEST',
    invokedFunctionArn: `arn:aws:lambda:${region}:${accountId}:function:${name}`,
    memoryLimitInMB: String(options.memoryLimitInMB ?? 1024),
    awsRequestId: options.awsRequestId ?? randomUUID(),
    logGroupName: `/aws/lambda/${name}`,
    logStreamName: `${day}/[$LATEST]local`,
    ...(options.clientContext ? { clientContext: options.clientContext } : {}),
    getRemainingTimeInMillis: () => Math.max(0, startedAtMs + options.timeoutMs - clock.now()),
    done: callbackStyle,
    fail: callbackStyle,
    succeed: callbackStyle,
  };
}
