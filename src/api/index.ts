export { handleApi, type ApiDeps } from './router.js';
export { batchView, type BatchView } from './views.js';
export { MAX_LIST_LIMIT } from './request.js';
export { HTTP_STATUS, RequestError, errorAnswer, type ErrorAnswer } from './errors.js';
