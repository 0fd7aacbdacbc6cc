export { handleApi, batchView, type ApiDeps, type BatchView } from './handler.js';
export { ApiError, MAX_LIST_LIMIT, MAX_NAME_LENGTH, MAX_PARAMS_DEPTH } from './request.js';
