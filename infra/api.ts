// The HTTP API (SST v4 `sst.aws.ApiGatewayV2`): one function behind the routes of README's HTTP
// API table, every route with IAM auth (callers sign with SigV4 and need `execute-api:Invoke`).
// Routes take `ANY` method, so the handler answers 405 with `allow` for a method a path does not
// have, as it does locally. The API invokes the worker: a new batch is sent to a worker at once.
import { runnerFunction, type Runner } from './functions.js';

/** The API's routes: the paths of README's HTTP API table. */
export const API_ROUTES: readonly string[] = [
  'ANY /batches',
  'ANY /batches/{id}',
  'ANY /batches/{id}/items',
  'ANY /batches/{id}/cancel',
  'ANY /jobs',
  'ANY /tenants/{tenant}/units',
  'ANY /tenants/{tenant}/outbox',
  'ANY /units',
  'ANY /processes',
  'ANY /concurrency',
];

/** Create the API function and the HTTP API routing every route to it. */
export function api(r: Runner) {
  const handler = runnerFunction(r, 'api', { timeoutSeconds: r.settings.timeouts.apiSeconds, invokesWorker: true });
  const gateway = new sst.aws.ApiGatewayV2('HttpApi', {
    transform: {
      route: {
        // Also for any route added later: IAM unless a route says otherwise.
        args: (props: { auth?: unknown }) => {
          props.auth ??= { iam: true };
        },
      },
    },
  });
  for (const route of API_ROUTES) {
    // By ARN: one function for all routes (a FunctionArgs handler would create one per route).
    gateway.route(route, handler.arn, { auth: { iam: true } });
  }
  return { handler, gateway };
}
