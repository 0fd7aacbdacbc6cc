// JSON Lines into items (docs/design.md, "Items in, results out, events"): each line checked
// with JSON.parse and stored as its own text when short and plain, else parsed and written
// again; and the input-size check every source item passes (shared with source-csv.ts).
import { INPUT_JSON, UNSTORABLE_ESCAPE, type ItemWithJson, type PageRows } from './items.js';
import { numberedKey, SourceReadError, type ObjectCursor, type ReadSettings } from './source-page.js';

/**
 * Throw when `input` as JSON is past the batch's input limit. `sourceBytes`, when known, is a
 * sixth of the most bytes its JSON can take, and spares the JSON text for an input far below the
 * limit. A line's own bytes are that: parsed and written again, a JSON value grows by at most 6
 * times (a number such as `1e20` writes as 21 digits; strings, escapes and whitespace only
 * shrink), so a line of at most a sixth of the limit always fits (a CSV row's bound: csvRows).
 */
export function checkInput(input: unknown, line: number, settings: ReadSettings, sourceBytes?: number): void {
  if (sourceBytes !== undefined && sourceBytes * 6 <= settings.maxInputBytes) return;
  let json: string;
  try {
    json = JSON.stringify(input) ?? 'null';
  } catch (e) {
    // Nested deeper than JSON.stringify goes (about 5,000 levels): never storable, so the
    // source's fault, not a passing one to try again.
    throw new SourceReadError(`line ${line} cannot be stored as JSON: ${(e as Error).message}`, line);
  }
  const bytes = Buffer.byteLength(json);
  if (bytes > settings.maxInputBytes) {
    throw new SourceReadError(
      `input bytes: line ${line} is ${bytes} bytes of JSON; the limit is ${settings.maxInputBytes}`,
      line,
    );
  }
}

/**
 * What sends a line down the slower way, parsed and written again, rather than stored as its own
 * text: an exponent (`1e400` is Infinity, so null, to JavaScript, and a numeric of 401 digits to
 * PostgreSQL, which refuses past 131,072), a run of 16 digits (past a double's precision; a
 * fraction of over 16,383 digits is refused), or a `\u` escape (written again, a valid pair is
 * a character and only a lone surrogate or NUL stays an escape, which the store check refuses).
 * Strings that merely look so (`"v1e5"`) take the slower way too.
 */
const REWRITE = /\d[eE][+-]?\d|\d{16}|\\u/;

/** What a line holding a number past the double range must contain (false positives only cost time). */
const MAY_OVERFLOW = /[eE][+]?\d{3}|\d{309}/;

/**
 * Throw when line `line`'s `text`, which JSON.parse read, holds a number past the double range:
 * parsed it is Infinity, written again null, so the item would not hold what the source says (the
 * API refuses such a body the same way: docs/api.md, "Errors"). Only a line that may hold one is
 * parsed again.
 * @throws {SourceReadError} naming the line (and the key, for a value of an object).
 */
function refuseOverflow(text: string, line: number): void {
  if (!MAY_OVERFLOW.test(text)) return;
  try {
    JSON.parse(text, (key, value: unknown) => {
      if (typeof value === 'number' && !Number.isFinite(value)) {
        throw new SourceReadError(
          `line ${line} holds a number past the double range (about ±1.8e308), which would be stored as null` +
            (key === '' ? '' : ` (at key ${JSON.stringify(key)})`),
          line,
        );
      }
      return value;
    });
  } catch (e) {
    if (e instanceof SourceReadError) throw e;
    // Nested deeper than the reviver goes: never storable either (as in checkInput).
    throw new SourceReadError(`line ${line} cannot be stored as JSON: ${(e as Error).message}`, line);
  }
}

/**
 * Longest line stored as its own text, bytes. A longer one may nest deeper than PostgreSQL's
 * parser goes (it stops at about 15,000 levels; JSON.stringify throws past about 5,000, which
 * ends the batch with a clear reason), and its size is measured as JSON written again.
 */
const AS_IS_BYTES = 4_096;

/**
 * A JSON Lines item stored as its line's text ({@link INPUT_JSON}); `input`, for callers of
 * {@link readPage}, parses it when asked.
 */
class LineItem {
  readonly [INPUT_JSON]: string;
  constructor(
    readonly key: string,
    text: string,
  ) {
    this[INPUT_JSON] = text;
  }
  get input(): unknown {
    return JSON.parse(this[INPUT_JSON]) as unknown;
  }
}

/**
 * The lines of `chunk` (from cursor `c`) as items keyed by their line number, zero-padded to the
 * digits of `size`, the object's bytes ({@link numberedKey}); blank lines are skipped and count
 * no row.
 * @throws {SourceReadError} a line that is not JSON or past the input limit.
 */
export function jsonLines(
  chunk: Buffer,
  c: ObjectCursor,
  settings: ReadSettings,
  size: number,
): { items: ItemWithJson[]; row: number; columns?: string[] } {
  const items: ItemWithJson[] = [];
  let row = c.row;
  let line = c.line;
  let start = 0;
  while (start < chunk.length) {
    let nl = chunk.indexOf(0x0a, start);
    if (nl === -1) nl = chunk.length;
    line++;
    let text = chunk.toString('utf8', start, nl);
    let lineBytes = nl - start;
    start = nl + 1;
    if (text.endsWith('\r')) {
      text = text.slice(0, -1);
      lineBytes--;
    }
    if (text.trim() === '') continue;
    let input: unknown;
    try {
      input = JSON.parse(text);
    } catch (e) {
      throw new SourceReadError(`line ${line} is not JSON: ${(e as Error).message}`, line);
    }
    row++;
    // As it is when short and plain: written again, such a line is no longer (whitespace and
    // `\/` go, `1.0` is `1`), so it is within the input limit as the line is.
    if (lineBytes <= Math.min(AS_IS_BYTES, settings.maxInputBytes) && !REWRITE.test(text)) {
      items.push(new LineItem(numberedKey(line, size), text));
    } else {
      refuseOverflow(text, line);
      checkInput(input, line, settings, lineBytes);
      items.push({ key: numberedKey(line, size), input });
    }
  }
  return { items, row };
}

/**
 * The lines of `chunk` as the rows a store takes ({@link PageRows}: the JSON array of their keys,
 * keyed as {@link jsonLines} keys them for an object of `size` bytes, and their inputs one a
 * line), built in one buffer: each line is checked with JSON.parse as {@link jsonLines} checks
 * it, then its own bytes are copied (short and plain) or its value is written again. The strings
 * and values of a line die with it.
 * @throws {SourceReadError} a line that is not JSON, past the input limit or not storable.
 */
export function jsonLinesRows(chunk: Buffer, c: ObjectCursor, settings: ReadSettings, size: number): PageRows & { row: number } {
  // Room for every line as it is, so the buffer grows only for lines written again longer than they were.
  let out = Buffer.allocUnsafe(chunk.length + 1);
  let at = 0;
  const put = (b: Buffer | string) => {
    const n = typeof b === 'string' ? Buffer.byteLength(b) : b.length;
    if (at + n > out.length) {
      const bigger = Buffer.allocUnsafe(Math.max(out.length * 2, at + n + 1024));
      out.copy(bigger, 0, 0, at);
      out = bigger;
    }
    at += typeof b === 'string' ? out.write(b, at) : b.copy(out, at);
  };
  const keys: string[] = [];
  let row = c.row;
  let line = c.line;
  let start = 0;
  while (start < chunk.length) {
    let nl = chunk.indexOf(0x0a, start);
    if (nl === -1) nl = chunk.length;
    line++;
    let end = nl;
    const from = start;
    start = nl + 1;
    if (end > from && chunk[end - 1] === 0x0d) end--;
    const text = chunk.toString('utf8', from, end);
    if (text.trim() === '') continue;
    let input: unknown;
    try {
      input = JSON.parse(text);
    } catch (e) {
      throw new SourceReadError(`line ${line} is not JSON: ${(e as Error).message}`, line);
    }
    row++;
    if (keys.length > 0) put('\n');
    keys.push(numberedKey(line, size));
    // As it is when short and plain (see jsonLines): a line holds no line end, and any CR in it
    // lies between JSON tokens, where it is whitespace.
    if (end - from <= Math.min(AS_IS_BYTES, settings.maxInputBytes) && !REWRITE.test(text)) {
      put(chunk.subarray(from, end));
    } else {
      refuseOverflow(text, line);
      checkInput(input, line, settings, end - from);
      const json = JSON.stringify(input) ?? 'null';
      if (json.includes('\\u') && UNSTORABLE_ESCAPE.test(json)) {
        throw new SourceReadError(`line ${line} holds a NUL character or an unpaired surrogate, which cannot be stored`, line);
      }
      put(json);
    }
  }
  // Keys are digits: their JSON needs no escapes.
  return {
    keys: keys.length === 0 ? '[]' : `["${keys.join('","')}"]`,
    inputs: out.toString('utf8', 0, at),
    count: keys.length,
    row,
  };
}
