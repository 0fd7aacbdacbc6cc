// Writing a new batch's items in bounded pieces, and the limits of a start (docs/design.md,
// "Batches"). Items may come from an array or stream from an (async) iterable, for example a
// directory listing: they are checked and serialised one by one, and sent as pieces of at most
// PIECE_ITEMS items or about PIECE_BYTES bytes, each one statement, so no parameter grows with
// the batch and PostgreSQL's 256 MiB limit on one JSON value never applies to a whole batch.
import type { Sql } from '../store/index.js';
import type { StartLimits } from './defaults.js';
import { BatchTooLargeError, InvalidBatchError } from './request-errors.js';
import { insertItemsPiece } from './sql/starts.js';
import type { ItemInput, ItemSource } from './types.js';

/**
 * Longest item key, in UTF-8 bytes: 1,024, S3's longest object key, so every key a prefix source
 * lists is an item key. Fixed: keys are indexed (`leasehold_items` primary key `(batch_id, key)`),
 * and a btree entry holds at most ~2,700 bytes.
 */
export const MAX_KEY_BYTES = 1024;

// The limits of a start live with the other defaults (the runtime's configuration reads them).
export { DEFAULT_START_LIMITS, type StartLimits } from './defaults.js';

/** Most items per insert statement. */
const PIECE_ITEMS = 10_000;
/** A piece is sent once its JSON text reaches this many bytes (one item may take it past). */
const PIECE_BYTES = 8 * 1024 * 1024;

/**
 * A JSON escape PostgreSQL's jsonb refuses: `\u0000`, or a surrogate escape (JSON.stringify
 * writes pairs as characters, so an escaped surrogate is an unpaired one). The look-behind and
 * the pairs of backslashes make sure the `\u` starts an escape rather than ends an escaped backslash.
 */
export const UNSTORABLE_ESCAPE = /(?<!\\)(?:\\\\)*\\u(?:0000|d[89a-f][0-9a-f]{2})/i;

/**
 * An item's input given as JSON text already known to be one JSON value that PostgreSQL stores
 * as JavaScript would read it (a source's line, docs/design.md, "Sources and results"):
 * {@link readItems} sends that text instead of writing `input` as JSON again, and checks its
 * size and escapes as it would the written text. Internal to the module: not on its public face.
 */
export const INPUT_JSON = Symbol('leasehold.inputJson');

/** An item that may carry its input's JSON text ({@link INPUT_JSON}) instead of `input`. */
export type ItemWithJson = ItemInput & { [INPUT_JSON]?: string };

const preview = (key: string) => JSON.stringify(key.length > 80 ? `${key.slice(0, 80)}…` : key);

/** A start's items, checked and serialised: JSON arrays of at most PIECE_ITEMS items or about PIECE_BYTES bytes. */
export interface ItemPieces {
  /** Each piece is the JSON text of `[{"k": key, "i": input}, …]`, one insert statement. */
  pieces: string[];
  /** Items in all pieces. */
  count: number;
}

/**
 * Read, check and serialise every item of `items` into pieces of bounded size, before any
 * transaction (docs/design.md, "Start": a start reads its items first, then locks and inserts,
 * so it never sits idle in a transaction while a slow source, a directory listing say, is read).
 * The pieces are held in memory: at most `limits.maxTotalBytes` of keys and inputs, plus JSON's
 * quotes and commas. `onePiece` makes every item one piece (a source's page, already bounded by
 * its reading, goes to the database as one statement).
 *
 * @throws {BatchTooLargeError} over a limit of `limits` or a key over {@link MAX_KEY_BYTES}.
 * @throws {InvalidBatchError} no items, a key that is not a string or holds NUL or an unpaired
 *   surrogate, an input that is not JSON or holds one of those.
 * @throws what the iterable throws.
 */
export async function readItems(items: ItemSource, limits: StartLimits, onePiece = false): Promise<ItemPieces> {
  let count = 0;
  let totalBytes = 0;
  let piece: string[] = [];
  let pieceBytes = 0;
  const pieces: string[] = [];
  const flush = () => {
    pieces.push(`[${piece.join(',')}]`);
    piece = [];
    pieceBytes = 0;
  };
  const add = (item: ItemInput): boolean => {
    count += 1;
    if (count > limits.maxItems) {
      throw new BatchTooLargeError(
        'items',
        limits.maxItems,
        `item count: more than ${limits.maxItems} items; the limit is ${limits.maxItems}`,
      );
    }
    const c = checkItem(item, count, limits.maxInputBytes);
    totalBytes += c.bytes;
    if (totalBytes > limits.maxTotalBytes) {
      throw new BatchTooLargeError(
        'totalBytes',
        limits.maxTotalBytes,
        `total bytes: the items' keys and inputs come to more than ${limits.maxTotalBytes} bytes; the limit is ${limits.maxTotalBytes}`,
      );
    }
    piece.push(`{"k":${c.keyJson},"i":${c.inputJson ?? 'null'}}`);
    pieceBytes += c.bytes + 12;
    return !onePiece && (piece.length >= PIECE_ITEMS || pieceBytes >= PIECE_BYTES);
  };

  if (Symbol.asyncIterator in items) {
    for await (const item of items) if (add(item)) flush();
  } else {
    for (const item of items) if (add(item)) flush();
  }
  if (piece.length > 0) flush();
  if (count === 0) throw new InvalidBatchError('a batch needs at least one item', 'params');
  return { pieces, count };
}

/**
 * A source page's items as a store takes them (sql/sources.ts, storePage): `keys`, the JSON
 * text of the array of their keys; `inputs`, their inputs' JSON texts one a line (`null` for
 * none); `count`, how many. JSON text holds no raw line end (JSON.stringify escapes it, a JSON
 * Lines line has none), so the lines of `inputs` are the items' inputs in order.
 */
export interface PageRows {
  keys: string;
  inputs: string;
  count: number;
}

/**
 * A source page's `items` checked as a start's items are ({@link readItems}: key bytes and
 * escapes, input bytes past `maxInputBytes` and escapes) and made the {@link PageRows} a store takes.
 * @throws {BatchTooLargeError} a key over {@link MAX_KEY_BYTES} or an input over `maxInputBytes`.
 * @throws {InvalidBatchError} a key or input that holds NUL or an unpaired surrogate, an input that is not JSON.
 */
export function pageRows(items: ItemInput[], maxInputBytes: number): PageRows {
  const keys: string[] = [];
  const inputs: string[] = [];
  for (const item of items) {
    const c = checkItem(item, keys.length + 1, maxInputBytes);
    keys.push(c.keyJson);
    inputs.push(c.inputJson ?? 'null');
  }
  return { keys: `[${keys.join(',')}]`, inputs: inputs.join('\n'), count: items.length };
}

/**
 * Item number `n`'s key and input as JSON text, checked: its key a string of at most
 * {@link MAX_KEY_BYTES} bytes, its input JSON of at most `maxInputBytes`, neither holding NUL or
 * an unpaired surrogate. `bytes`: the key's and the input's bytes.
 */
function checkItem(item: ItemInput, n: number, maxInputBytes: number): { keyJson: string; inputJson?: string; bytes: number } {
  const key: unknown = item?.key;
  if (typeof key !== 'string') throw new InvalidBatchError(`item ${n}: key must be a string`, 'params');
  const keyBytes = Buffer.byteLength(key);
  if (keyBytes > MAX_KEY_BYTES) {
    throw new BatchTooLargeError(
      'keyBytes',
      MAX_KEY_BYTES,
      `key bytes: the key of item ${preview(key)} is ${keyBytes} bytes; the limit is ${MAX_KEY_BYTES}`,
    );
  }
  const keyJson = JSON.stringify(key);
  if (UNSTORABLE_ESCAPE.test(keyJson)) {
    throw new InvalidBatchError(
      `the key of item ${n} (${preview(key)}) contains a NUL character or an unpaired surrogate`,
      'params',
    );
  }
  let inputJson: string | undefined = (item as ItemWithJson)[INPUT_JSON];
  try {
    if (inputJson === undefined) inputJson = item.input === undefined ? undefined : JSON.stringify(item.input);
  } catch (e) {
    throw new InvalidBatchError(`the input of item ${preview(key)} is not JSON: ${(e as Error).message}`, 'params');
  }
  const inputBytes = inputJson === undefined ? 0 : Buffer.byteLength(inputJson);
  if (inputBytes > maxInputBytes) {
    throw new BatchTooLargeError(
      'inputBytes',
      maxInputBytes,
      `input bytes: the input of item ${preview(key)} is ${inputBytes} bytes of JSON; the limit is ${maxInputBytes}`,
    );
  }
  if (inputJson !== undefined && inputJson.includes('\\u') && UNSTORABLE_ESCAPE.test(inputJson)) {
    throw new InvalidBatchError(`the input of item ${preview(key)} contains a NUL character or an unpaired surrogate`, 'params');
  }
  return { keyJson, inputJson, bytes: keyBytes + inputBytes };
}

/**
 * Insert the pieces of {@link readItems} into batch `batchId` inside the caller's transaction,
 * one statement per piece, sent back to back; returns how many items were inserted.
 * @throws {InvalidBatchError} two items with one key.
 */
export async function insertItems(tx: Sql, batchId: string, items: ItemPieces): Promise<number> {
  for (const json of items.pieces) {
    try {
      await insertItemsPiece(tx, batchId, json);
    } catch (e) {
      throw duplicateKeyError(e) ?? e;
    }
  }
  return items.count;
}

/** The refusal for a unique violation of the items' primary key: two items with one key. */
function duplicateKeyError(e: unknown): InvalidBatchError | undefined {
  const err = e as { code?: unknown; constraint_name?: unknown; detail?: unknown } | null;
  if (err?.code !== '23505' || err.constraint_name !== 'leasehold_items_pkey') return undefined;
  // "Key (batch_id, key)=(<uuid>, <key>) already exists."
  const key =
    typeof err.detail === 'string'
      ? /^Key \(batch_id, key\)=\([0-9a-f-]{36}, (.*)\) already exists\.$/s.exec(err.detail)?.[1]
      : undefined;
  return new InvalidBatchError(
    key === undefined ? 'two items have the same key' : `duplicate item key ${preview(key)}`,
    'params',
  );
}
