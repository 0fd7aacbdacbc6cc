// Response streaming in Lambda (docs/deploy.md, "Progress stream"): the runtime's global
// `awslambda.streamifyResponse`, which exists only inside the Lambda Node.js runtime. Small and
// loaded with the handler file; the stream itself (stream.ts) is loaded on the first invocation.
import type { Writable } from 'node:stream';
import type { Context } from 'aws-lambda';

/** The status and headers of a streamed response: the prelude of a function URL's HTTP response. */
export interface StreamPrelude {
  statusCode: number;
  headers: Record<string, string>;
}

/**
 * Opens the response: writes `prelude` and answers the stream the body goes to. In Lambda this
 * is `awslambda.HttpResponseStream.from(responseStream, prelude)`.
 */
export type OpenResponse = (prelude: StreamPrelude) => Writable;

/** The Lambda Node.js runtime's global for response streaming (absent elsewhere). */
interface AwsLambdaGlobal {
  streamifyResponse<E>(handler: (event: E, responseStream: Writable, context: Context) => Promise<void>): unknown;
  HttpResponseStream: { from(responseStream: Writable, prelude: StreamPrelude): Writable };
}

/**
 * A handler made by `awslambda.streamifyResponse`: Lambda calls it with `(event, responseStream,
 * context)` (outside Lambda it only throws {@link StreamingUnavailableError}).
 */
export type StreamingLambdaHandler = (...args: never[]) => Promise<void>;

/** Thrown when a streaming handler is invoked outside the Lambda Node.js runtime. */
export class StreamingUnavailableError extends Error {
  readonly code = 'streaming_unavailable';
  constructor() {
    super(
      'response streaming needs the Lambda Node.js runtime (its global `awslambda.streamifyResponse`); ' +
        'locally, `leasehold dev` serves GET /batches/{id}/events itself',
    );
    this.name = 'StreamingUnavailableError';
  }
}

/**
 * `inner` wrapped with `awslambda.streamifyResponse` when that global is there (in Lambda). Outside
 * Lambda the answer is a function that throws {@link StreamingUnavailableError} when called, so a
 * handler file still loads (`leasehold dev`, tests).
 */
export function streamingHandler<E>(
  inner: (event: E, open: OpenResponse, context: Context) => Promise<void>,
): StreamingLambdaHandler {
  const lambda = (globalThis as unknown as { awslambda?: AwsLambdaGlobal }).awslambda;
  if (!lambda?.streamifyResponse) {
    return () => Promise.reject(new StreamingUnavailableError());
  }
  return lambda.streamifyResponse<E>((event, responseStream, context) =>
    inner(event, (prelude) => lambda.HttpResponseStream.from(responseStream, prelude), context),
  ) as StreamingLambdaHandler;
}
