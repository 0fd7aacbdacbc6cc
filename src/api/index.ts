// The HTTP API (docs/api.md; docs/design.md, "Serverless runtime").
//
// Owns no table: it validates requests and calls the domain. Keeps invariant 7 (one request's
// bad input is a 4xx for it alone) and answers every error with its code's status
// (`HTTP_STATUS`, errors.ts, the one table of error codes). Entry points: `handleApi` (an API
// Gateway v2 event in, a response out), `batchView`, `errorAnswer`. The routes it serves are
// listed in src/contract.ts and documented in docs/api.md. Never imports the runtime or the trigger.
export { handleApi, type ApiDeps } from './router.js';
export { batchView, type BatchView } from './views.js';
export { MAX_LIST_LIMIT } from './request.js';
export { HTTP_STATUS, RequestError, errorAnswer, type ErrorAnswer } from './errors.js';
