// The one table from an error's code to the API's HTTP status (src/api/errors.ts): every error
// the library throws at a caller is answered with its status, and nothing else leaks out.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { errorAnswer, HTTP_STATUS, RequestError } from '../../src/api/errors.js';
import { StoreTimeoutError } from '../../src/store/index.js';
import {
  BatchCancelledError,
  BatchFinishedError,
  BatchNotFoundError,
  BatchOpenError,
  BatchTooLargeError,
  InvalidBatchError,
  NothingToRedriveError,
  TooManyBatchesError,
} from '../../src/batch/index.js';
import { InvalidRequestError, InvalidSettingError, LeaseholdError, type ErrorCode } from '../../src/errors.js';
import { InvalidParamsError, UnknownJobError } from '../../src/jobs/index.js';
import { NoOutboxUnitsError } from '../../src/units/index.js';

describe('the error table', () => {
  it('answers each library error a caller can cause with its status and code, naming the field', () => {
    const cases: [LeaseholdError, number, ErrorCode, RegExp][] = [
      [new InvalidRequestError('tenant: Required'), 400, 'invalid_request', /^tenant: Required$/],
      [new InvalidParamsError('params.dir', 'outside the allowed roots'), 400, 'invalid_params', /^params\.dir: outside/],
      [new InvalidBatchError('two items share the key "a"', 'params'), 400, 'invalid_batch', /^params: two items/],
      // One that names its own field is not said to be about params.
      [new InvalidBatchError('pool "p" does not exist'), 400, 'invalid_batch', /^pool "p" does not exist$/],
      [new BatchCancelledError('b1'), 400, 'batch_cancelled', /b1/],
      [new BatchNotFoundError('b1'), 404, 'batch_not_found', /b1/],
      [new UnknownJobError('nope'), 404, 'unknown_job', /^job: unknown job "nope"$/],
      [
        new UnknownJobError('chekcsum', ['checksum', 'noop']),
        404,
        'unknown_job',
        /^job: unknown job "chekcsum" \(this app's jobs: checksum, noop\)$/,
      ],
      [new UnknownJobError('nope', []), 404, 'unknown_job', /^job: unknown job "nope" \(this app has no jobs\)$/],
      [
        new UnknownJobError(
          'nope',
          Array.from({ length: 23 }, (_, i) => `j${i}`),
        ),
        404,
        'unknown_job',
        /^job: unknown job "nope" \(this app's jobs: j0, j1, .*, j19 and 3 more\)$/,
      ],
      [new NoOutboxUnitsError('acme'), 404, 'no_outbox_units', /acme/],
      [new BatchFinishedError('b1', 'succeeded'), 409, 'batch_finished', /b1/],
      [new BatchOpenError('b1'), 409, 'batch_open', /b1/],
      [new NothingToRedriveError('b1'), 409, 'nothing_to_redrive', /b1/],
      [new BatchTooLargeError('items', 10, '11 items is over maxItems (10)'), 413, 'batch_too_large', /^params: 11 items/],
      [new TooManyBatchesError('acme', 'files', 4), 429, 'too_many_batches', /maxOpen 4/],
      [new RequestError('not_found', 'no route GET /x'), 404, 'not_found', /^no route/],
      [new RequestError('body_too_large', 'body: 70000 bytes'), 413, 'body_too_large', /^body: /],
      [new RequestError('unsupported_media_type', 'content-type: …'), 415, 'unsupported_media_type', /^content-type/],
      [new RequestError('invalid_json', 'body: malformed JSON'), 400, 'invalid_json', /^body: /],
    ];
    for (const [error, status, code, message] of cases) {
      const answer = errorAnswer(error);
      expect(answer, code).toMatchObject({ status, code });
      expect(answer!.message, code).toMatch(message);
      expect(HTTP_STATUS[code], code).toBe(status);
    }
    expect(errorAnswer(new RequestError('method_not_allowed', 'use GET', { allow: 'GET' }))).toEqual({
      status: 405,
      code: 'method_not_allowed',
      message: 'use GET',
      headers: { allow: 'GET' },
    });
  });

  it('answers nothing (a 500 whose details stay in the log) for any other error', () => {
    for (const error of [
      new Error('boom'),
      new RangeError('out of range'),
      new InvalidSettingError('attempts', 'must be an integer from 1 to 1000 (got 0)'),
      new LeaseholdError('config', 'LEASEHOLD_ATTEMPTS: …'),
      Object.assign(new Error('duplicate key'), { code: '23505' }),
      { code: 'not_found', message: 'not an Error' },
      'not_found',
      null,
    ]) {
      expect(errorAnswer(error), String(error)).toBeUndefined();
    }
  });

  it('answers errors of another copy of leasehold (an app’s jobs) by their code', () => {
    class ForeignUnknownJobError extends Error {
      readonly code = 'unknown_job';
    }
    expect(errorAnswer(new ForeignUnknownJobError('unknown job "x"'))).toMatchObject({ status: 404, code: 'unknown_job' });
  });

  it('answers 503 database_unavailable with Retry-After when the database cannot serve now: a lost or refused connection (an IAM login limit too), a lock timeout, a store timeout', () => {
    const pg = (code: string, message = 'x') => Object.assign(new Error(message), { code });
    for (const error of [
      pg('ECONNRESET'),
      pg('CONNECTION_CLOSED'),
      pg('57P01'),
      pg('25006'),
      pg('53300'),
      pg('28000', 'PAM authentication failed for user "app": too many competing requests'),
      pg('55P03'),
      new StoreTimeoutError(2_000),
    ]) {
      expect(errorAnswer(error), String(error)).toEqual({
        status: 503,
        code: 'database_unavailable',
        message: 'the database could not serve the request now; try again',
        headers: { 'retry-after': '1' },
      });
    }
    // A login refused for any other reason is not retryable.
    expect(errorAnswer(pg('28000', 'role "app" is not permitted to log in'))).toBeUndefined();
  });

  // 503 only for a dependency that cannot answer now: the database, or S3 while a start checks its source.
  it('has only 4xx statuses (and 503 database_unavailable, source_unavailable), each code documented in docs/api.md', () => {
    const doc = readFileSync(new URL('../../docs/api.md', import.meta.url), 'utf8');
    for (const [code, status] of Object.entries(HTTP_STATUS)) {
      expect(
        (status >= 400 && status < 500) || (status === 503 && (code === 'database_unavailable' || code === 'source_unavailable')),
        code,
      ).toBe(true);
      expect(doc, `docs/api.md names ${code}`).toContain(code);
    }
  });
});
