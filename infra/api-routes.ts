// The Leasehold component's HTTP API: every path of docs/api.md (src/contract.ts's API_PATHS),
// routed to the one API function. Every route takes IAM auth except the three callback routes,
// which a signed token alone authorises (docs/api.md, "Callbacks").
import { API_PATHS } from '../src/contract.js';
import type { Build } from './build.js';
import type { FunctionLike, Output } from './platform.js';

const isCallback = (path: string): boolean => path.startsWith('/callbacks/');

/**
 * The routes without IAM auth: `POST /callbacks/{token}/succeed|fail|heartbeat`. The token's
 * HMAC is their authorisation (a forged or altered token gets 403 from the API function), so a
 * third party completes a callback without AWS credentials. POST only: another method on these
 * paths is not routed (API Gateway answers 404) and so never reaches the function unsigned.
 */
export const PUBLIC_API_ROUTES: readonly string[] = API_PATHS.filter(isCallback).map((path) => `POST ${path}`);

/**
 * The API's routes: the paths of docs/api.md, every method (the handler answers 405 for a method
 * a path lacks), except the callback paths: POST only ({@link PUBLIC_API_ROUTES}).
 */
export const API_ROUTES: readonly string[] = API_PATHS.map((path) => (isCallback(path) ? `POST ${path}` : `ANY ${path}`));

/**
 * A route's auth: `false` (none) for a route of {@link PUBLIC_API_ROUTES}, else `{ iam: true }`
 * (SST's ApiGatewayV2 route `auth`).
 */
export function routeAuth(route: string): false | { iam: true } {
  return PUBLIC_API_ROUTES.includes(route) ? false : { iam: true };
}

/**
 * The HTTP API: IAM auth on every route but {@link PUBLIC_API_ROUTES}; a route added later
 * through the transform defaults to IAM too (an explicit `auth: false` there is kept).
 */
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
  for (const route of API_ROUTES) http.route(route, api.arn, { auth: routeAuth(route) });
  return { httpApi: http, url: http.url };
}
