// The Leasehold component's HTTP API: every path of docs/api.md (src/contract.ts's API_PATHS),
// every method, routed to the one API function with IAM auth.
import { API_PATHS } from '../src/contract.js';
import type { Build } from './build.js';
import type { FunctionLike, Output } from './platform.js';

/** The API's routes: the paths of docs/api.md, every method (the handler answers 405 for a method a path lacks). */
export const API_ROUTES: readonly string[] = API_PATHS.map((path) => `ANY ${path}`);

/** The HTTP API: every route with IAM auth, also any added later through the transform. */
export function httpApi(b: Build, api: FunctionLike): { httpApi: unknown; url: Output<string> } {
  const { name, t, create } = b;
  const { sst } = b.p;
  const http = create(
    sst.aws.ApiGatewayV2,
    `${name}HttpApi`,
    {
      transform: {
        route: {
          args: (props: { auth?: unknown }) => {
            props.auth ??= { iam: true };
          },
        },
      },
    },
    t.httpApi,
  );
  // By ARN: one function for all routes (a handler per route would create one function each).
  for (const route of API_ROUTES) http.route(route, api.arn, { auth: { iam: true } });
  return { httpApi: http, url: http.url };
}
