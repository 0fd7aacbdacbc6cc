// Local mode (docs/design.md, "Local mode"): the drivers that run the same handlers on one machine.
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
