// What an item's work returns or throws, made storable before it joins a move: one value that
// PostgreSQL or JSON cannot hold must fail its own item, never the move that carries the others
// (docs/design.md, "Batches").

/** Default of the runner's `maxOutputBytes`: the largest item output stored, in bytes of JSON (256 KiB). */
export const DEFAULT_MAX_OUTPUT_BYTES = 262_144;

/** Longest error text stored per item, in UTF-16 code units; longer texts are cut with a note. */
export const MAX_ERROR_CHARS = 8_192;

/** An output that can be stored (`json`), or why it cannot (`error`, a sentence for the item). */
export type EncodedOutput = { json: string | null; error?: undefined } | { json?: undefined; error: string };

// In JSON text written by JSON.stringify: an escaped backslash (skipped as a pair, so `\\u0000`
// is not mistaken for an escape), a NUL escape, or a surrogate escape. JSON.stringify writes a
// surrogate as an escape only when it is alone (a well-formed pair is written as is).
const ESCAPES = /\\(?:\\|u(0000|d[89a-f][0-9a-f]{2}))/gi;

/**
 * What {@link encodeOutput}'s refusal calls the value: `subject` begins the sentence (`its
 * output`), `limit` names the setting behind `maxBytes` (null: none to name).
 */
export interface EncodedNames {
  subject: string;
  limit: string | null;
}

const OUTPUT_NAMES: EncodedNames = { subject: 'its output', limit: 'maxOutputBytes' };

/**
 * Encode an item's output as JSON text that PostgreSQL's `jsonb` accepts, within `maxBytes`
 * (UTF-8 bytes of the JSON text). `undefined` and `null` store as null.
 *
 * Refused, with a sentence saying why: values `JSON.stringify` cannot encode (BigInt, cycles,
 * a throwing `toJSON`), strings or keys holding NUL (`\u0000`) or a lone surrogate (jsonb
 * refuses both), and outputs over `maxBytes`. `names` says what the value is in that sentence
 * (default: an item's output, its limit `maxOutputBytes`).
 */
export function encodeOutput(value: unknown, maxBytes: number, names: EncodedNames = OUTPUT_NAMES): EncodedOutput {
  if (value === undefined || value === null) return { json: null };
  let text: string | undefined;
  try {
    text = JSON.stringify(value);
  } catch (e) {
    return { error: `${names.subject} cannot be stored: JSON cannot encode it (${describe(e)})` };
  }
  // Functions and symbols stringify to undefined, like a missing output.
  if (text === undefined) return { json: null };
  // UTF-8 takes at most 3 bytes per UTF-16 code unit: count bytes only when it could matter.
  if (text.length * 3 > maxBytes) {
    const bytes = Buffer.byteLength(text);
    if (bytes > maxBytes) {
      const setting = names.limit === null ? '' : ` (${names.limit})`;
      return { error: `${names.subject} cannot be stored: ${bytes} bytes of JSON, over the limit of ${maxBytes}${setting}` };
    }
  }
  if (text.includes('\\')) {
    for (const m of text.matchAll(ESCAPES)) {
      if (m[1] === undefined) continue;
      return {
        error:
          m[1] === '0000'
            ? `${names.subject} cannot be stored: it contains a NUL character (\\u0000), which PostgreSQL cannot store`
            : `${names.subject} cannot be stored: it contains a lone surrogate (\\u${m[1].toLowerCase()}), which is not valid Unicode`,
      };
    }
  }
  return { json: text };
}

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

/**
 * The one gate of every reason, error and event text leasehold stores (a batch's `reason`, an
 * item's `error`, the events' `send_error` and `notify_error`, `results_error`, the outbox's
 * `last_error`): each SQL module passes such a text through here at its statement, whatever
 * made it (issue 37: a reason quoting a binary object's NUL bytes was refused by PostgreSQL, so
 * the end that should have stored it failed, again and again).
 *
 * Make a text storable in a `text` column and in JSON: NUL and lone surrogates become U+FFFD
 * (the replacement character), and a text longer than `maxChars` (default
 * {@link MAX_ERROR_CHARS}) is cut, saying how long it was.
 */
export function storableText(text: string, maxChars = MAX_ERROR_CHARS): string {
  let t = text;
  // A text this already cut stays as it is (the gate is applied again where it is stored).
  if (t.length > maxChars && !isCut(t, maxChars)) t = `${t.slice(0, maxChars)}… (${t.length} characters, cut)`;
  // After the cut: a pair split by it leaves a lone high surrogate, replaced here too.
  // eslint-disable-next-line no-control-regex -- NUL is what this replaces (PostgreSQL text cannot hold it)
  return t.replace(/\u0000/g, '\ufffd').replace(LONE_SURROGATE, '\ufffd');
}

const CUT_MARK = /… \(\d+ characters, cut\)$/;

/** Whether `t` is a text {@link storableText} already cut to `maxChars`. */
function isCut(t: string, maxChars: number): boolean {
  const m = CUT_MARK.exec(t);
  return m !== null && m.index <= maxChars;
}

/** The message of anything thrown, as storable text; never throws itself. */
export function errorText(e: unknown): string {
  return storableText(describe(e));
}

function describe(e: unknown): string {
  try {
    return String(e instanceof Error ? e.message : e);
  } catch {
    try {
      // An object whose toString throws, or one with no prototype.
      return Object.prototype.toString.call(e);
    } catch {
      // A proxy whose traps throw, or a revoked one: even its tag cannot be read.
      return 'a thrown value that cannot be read (a proxy whose traps throw?)';
    }
  }
}

/**
 * What an attempt threw, as a value the run can test with `instanceof` and read: the value
 * itself, or an Error saying it could not be read. A revoked proxy, or one whose traps throw,
 * throws at `instanceof`; such a value once left its item's slot taken for ever, the run beating
 * and the batch open (invariants 3 and 7). Never throws.
 */
export function readableThrown(e: unknown): unknown {
  try {
    void (e instanceof Error);
    return e;
  } catch {
    return new Error(describe(e));
  }
}
