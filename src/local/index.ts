// Local mode (docs/design.md, "Local mode"): the drivers that run the same handlers on one machine.
//
// Owns no table (it may start an embedded PostgreSQL whose data folder it owns). Keeps the
// runtime's invariants by running the runtime's own handlers: an HTTP server turning requests
// into API Gateway v2 events, a local Lambda invoke endpoint and PutEvents endpoint reached by the
// real SDK clients, an S3-compatible server. Entry points: `startEmbedded`, `startHttpServer`,
// `createInvokeEndpoint`, `createEventsEndpoint`, and `leasehold dev` (dev.ts).
export {
  startEmbedded,
  defaultDataDir,
  EMBEDDED_DEFAULT_PORT,
  EMBEDDED_USER,
  EMBEDDED_PASSWORD,
  EMBEDDED_DATABASE,
  EmbeddedPostgresError,
  EmbeddedDataDirInUseError,
  EmbeddedStartError,
  type EmbeddedOptions,
  type EmbeddedPostgres,
} from './embedded/index.js';
export {
  createInvokeEndpoint,
  localLambdaEnv,
  LocalInvocationTimeoutError,
  type InvokeEndpoint,
  type InvokeEndpointOptions,
  type InvocationInfo,
  type InvocationOutcome,
  type LocalInvocationType,
  type LocalLambdaHandler,
  type StopOptions,
} from './invoke-endpoint.js';
export {
  startHttpServer,
  LOCAL_IAM_IDENTITY,
  type HttpApiHandler,
  type HttpExchange,
  type HttpServer,
  type HttpServerOptions,
} from './http-server.js';
export { createLambdaContext, systemNow, type LambdaContextOptions, type LambdaLikeContext, type NowClock } from './context.js';
export { LocalPortInUseError } from './http-util.js';
export {
  createEventsEndpoint,
  defaultRoute,
  localEventsEnv,
  type EventsEndpoint,
  type EventsEndpointOptions,
  type LocalBusEvent,
} from './events-endpoint.js';
export { batchEventsRoute } from './batch-events.js';
