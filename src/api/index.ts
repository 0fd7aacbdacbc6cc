export { handleApi, type ApiDeps } from './handler.js';
export { batchView, type BatchView } from './batch-view.js';
export { MAX_LIST_LIMIT } from './request.js';
export { HTTP_STATUS, RequestError, errorAnswer, type ErrorAnswer } from './errors.js';
