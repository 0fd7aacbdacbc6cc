// The callback routes (docs/api.md, "Callbacks"; docs/design.md, "Waiting items: callbacks and
// sleeps"): a waiting item's callback completed (`succeed` with a JSON result, `fail` with an
// error) or heartbeated, named by its signed token alone. On AWS the routes take no IAM
// signature (a third party completes them with the token: its HMAC is the authority); an
// IAM-signed request is answered the same.
import type { APIGatewayProxyEventV2 } from 'aws-lambda';
import * as z from '../../zod.js';
import { completeCallback, parseInput, type CallbackAnswer, type CallbackCompletion } from '../../batch/index.js';
import { errorFields } from '../../log.js';
import type { ApiDeps } from '../deps.js';
import { readJsonBody } from '../request.js';
import { json, type Result } from '../respond.js';

/** Body of `POST /callbacks/{token}/succeed`: the result, any JSON (null when absent). */
const succeedSchema = z.strictObject({ result: z.optional(z.unknown()) });
/** Body of `POST /callbacks/{token}/fail`: the error text (at most 8,192 characters are kept). */
const failSchema = z.strictObject({ error: z.string().check(z.minLength(1)) });

/** `POST /callbacks/{token}/succeed`: 200 `{ outcome, woken }`; 403, 404, 409 (docs/api.md). */
export async function succeedCallbackRoute(event: APIGatewayProxyEventV2, deps: ApiDeps, [token]: string[]): Promise<Result> {
  const body = parseInput(succeedSchema, readJsonBody(event, deps.config.maxBodyBytes), 'body');
  return answer(deps, await completeCallback(deps.sql, token, { action: 'succeed', result: body.result ?? null }));
}

/** `POST /callbacks/{token}/fail`: 200 `{ outcome, woken }`; 403, 404, 409 (docs/api.md). */
export async function failCallbackRoute(event: APIGatewayProxyEventV2, deps: ApiDeps, [token]: string[]): Promise<Result> {
  const body = parseInput(failSchema, readJsonBody(event, deps.config.maxBodyBytes), 'body');
  return answer(deps, await completeCallback(deps.sql, token, { action: 'fail', error: body.error }));
}

/** `POST /callbacks/{token}/heartbeat` (no body): 200 `{ outcome: "heartbeat" }`; 403, 404, 409. */
export async function heartbeatCallbackRoute(_event: APIGatewayProxyEventV2, deps: ApiDeps, [token]: string[]): Promise<Result> {
  const c: CallbackCompletion = { action: 'heartbeat' };
  return answer(deps, await completeCallback(deps.sql, token, c));
}

// A batch the completion gave a run again gets a worker at once (the scheduler's next pass
// would send it: this only makes the item's next attempt sooner).
async function answer(deps: ApiDeps, a: CallbackAnswer): Promise<Result> {
  if (a.unparked) {
    try {
      await deps.workers.send(a.batchId, 1);
    } catch (error) {
      deps.log('warn', 'dispatch of a woken batch failed', { batchId: a.batchId, error: errorFields(error) });
    }
  }
  return json(200, { batchId: a.batchId, key: a.key, outcome: a.outcome, woken: a.woken });
}
