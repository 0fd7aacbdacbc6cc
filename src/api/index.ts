export { handleApi, type ApiDeps } from './handler.js';
export { batchView, type BatchView } from './batch-view.js';
export { ApiError, MAX_LIST_LIMIT } from './request.js';
