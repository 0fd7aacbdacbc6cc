// Batch Finished events within EventBridge's limit (docs/design.md, "Events"): a PutEvents call
// may carry at most 256 KiB of entries, so an event is at most that, whatever its reason or
// results hold (its longest text fields are cut, and the event says which), and the entries of
// one send are split into calls that each stay within it, so one large event never fails the
// others of its call.
import { BATCH_FINISHED, EVENT_SOURCE, type BatchFinishedDetail } from '../batch/index.js';
import { PUT_EVENTS_MAX_BYTES } from '../contract.js';

/** What a cut text ends with. */
const MARK = '…';

/** The text fields of a detail that may be cut, by name (as `truncated` lists them). */
const CUTTABLE: { name: string; get(d: BatchFinishedDetail): unknown; set(d: BatchFinishedDetail, v: string): void }[] = [
  { name: 'reason', get: (d) => d.reason, set: (d, v) => (d.reason = v) },
  { name: 'results.manifest', get: (d) => d.results?.manifest, set: (d, v) => (d.results = { manifest: v }) },
  { name: 'requestKey', get: (d) => d.requestKey, set: (d, v) => (d.requestKey = v) },
  { name: 'datasource', get: (d) => d.datasource, set: (d, v) => (d.datasource = v) },
  { name: 'job', get: (d) => d.job, set: (d, v) => (d.job = v) },
  { name: 'tenant', get: (d) => d.tenant, set: (d, v) => (d.tenant = v) },
];

const jsonBytes = (v: unknown) => Buffer.byteLength(JSON.stringify(v));

/**
 * Most bytes of a Batch Finished detail's JSON: what one PutEvents call takes, less the rest of
 * its entry (Time's 14 bytes, Source, DetailType).
 */
export const MAX_DETAIL_BYTES = PUT_EVENTS_MAX_BYTES - 14 - Buffer.byteLength(EVENT_SOURCE) - Buffer.byteLength(BATCH_FINISHED);

/**
 * `detail` as at most `maxBytes` of JSON (default {@link MAX_DETAIL_BYTES}): unchanged when it
 * fits; else a copy whose longest text fields (reason, results.manifest, requestKey,
 * datasource, job, tenant) are cut, longest first, each ending with `…`, and whose `truncated`
 * names the fields cut. The stored event is not changed: every send cuts it the same way.
 */
export function boundDetail(detail: BatchFinishedDetail, maxBytes = MAX_DETAIL_BYTES): BatchFinishedDetail {
  if (jsonBytes(detail) <= maxBytes) return detail;
  const out: BatchFinishedDetail = { ...structuredClone(detail), truncated: [] };
  const truncated = out.truncated!;
  for (let size = jsonBytes(out); size > maxBytes; size = jsonBytes(out)) {
    // The longest field with text left to cut (without the mark of an earlier cut).
    let field: (typeof CUTTABLE)[number] | undefined;
    let text = '';
    for (const f of CUTTABLE) {
      const v = f.get(out);
      if (typeof v !== 'string') continue;
      const base = truncated.includes(f.name) ? v.slice(0, -MARK.length) : v;
      if (base.length > 0 && jsonBytes(base) > jsonBytes(text)) [field, text] = [f, base];
    }
    if (!field) break;
    if (!truncated.includes(field.name)) {
      truncated.push(field.name);
      size = jsonBytes(out);
    }
    // The longest start of the text that fits with the mark: its JSON may take what the detail
    // has below the bound, plus what the field takes now, less the mark's 3 bytes.
    const room = maxBytes - size + jsonBytes(field.get(out)) - Buffer.byteLength(MARK);
    let [lo, hi] = [0, text.length - 1];
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (jsonBytes(text.slice(0, mid)) <= room) lo = mid;
      else hi = mid - 1;
    }
    let keep = lo;
    if (keep > 0 && /[\uD800-\uDBFF]/.test(text[keep - 1])) keep--;
    field.set(out, text.slice(0, keep) + MARK);
  }
  return out;
}

/**
 * The entries of one send, by index, in calls whose sizes add up to at most `maxBytes` (default
 * 256 KiB), at most `maxEntries` (10) each, in order. An entry past `maxBytes` on its own is in
 * no call: `tooLarge` lists it, to fail alone.
 */
export function packCalls(
  sizes: readonly number[],
  maxBytes = PUT_EVENTS_MAX_BYTES,
  maxEntries = 10,
): { calls: number[][]; tooLarge: number[] } {
  const calls: number[][] = [];
  const tooLarge: number[] = [];
  let call: number[] = [];
  let bytes = 0;
  for (const [i, size] of sizes.entries()) {
    if (size > maxBytes) {
      tooLarge.push(i);
      continue;
    }
    if (call.length === maxEntries || bytes + size > maxBytes) {
      calls.push(call);
      [call, bytes] = [[], 0];
    }
    call.push(i);
    bytes += size;
  }
  if (call.length > 0) calls.push(call);
  return { calls, tooLarge };
}
