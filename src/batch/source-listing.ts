// Reading a prefix source (docs/design.md, "Items in, results out, events"): a page of its
// listing, the listing chains it is cut into after its first page, and S3's order of keys that
// the chains' ranges are compared in.
import type { S3Client } from '@aws-sdk/client-s3';
import { listedKey } from './s3.js';
import { s3Call, sdk, type ReadSettings, type SourcePage } from './source-page.js';
import type { ItemInput, ListChain, SourceCursor } from './types.js';

/** Listing chains a prefix's listing is cut into after its first page (see {@link readListing}). */
export const LIST_CHAINS = 4;

/**
 * S3's order of keys: by their UTF-8 bytes, which is code point order. JavaScript's `<` orders
 * UTF-16 code units, which differs only where a surrogate (U+D800-DFFF, half of a character past
 * U+FFFF) meets a unit from U+E000: that pair is compared as code points would be. No copy.
 */
export function compareKeys(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    let x = a.charCodeAt(i);
    let y = b.charCodeAt(i);
    if (x === y) continue;
    if (x >= 0xd800 && y >= 0xd800) {
      // Surrogates above every unit from U+E000 (they stand for code points past U+FFFF).
      x += x >= 0xe000 ? -0x800 : 0x2000;
      y += y >= 0xe000 ? -0x800 : 0x2000;
    }
    return x - y;
  }
  return a.length - b.length;
}

/**
 * A page of a prefix's listing. The first page is one call from the prefix's start (at most
 * 1,000 objects, so work starts at once). After it the rest of the prefix is cut into
 * {@link LIST_CHAINS} disjoint key ranges, each listed by a chain of its own, all at once: one
 * chain of calls waits for each answer's continuation token, so its pace is a call's round trip
 * (on the local S3 about 30 ms per 1,000 keys). The cuts only balance the chains; every key lies
 * in exactly one range whatever they are, so no object is missed or read twice.
 */
export async function readListing(
  client: S3Client,
  s: { bucket: string; prefix: string },
  cursor: SourceCursor | null,
  settings: ReadSettings,
): Promise<SourcePage> {
  let chains: ListChain[];
  let split = true;
  let alphabet: string | undefined;
  if (cursor === null) {
    chains = [{ after: '', token: null, until: null }];
    split = false;
  } else if ('token' in cursor) {
    chains = cursor.token === null ? [] : [{ after: '', token: cursor.token, until: null }];
  } else if ('chains' in cursor) {
    ({ chains, split, alphabet } = cursor);
  } else {
    throw new Error('an object cursor for a prefix source');
  }
  // A directory bucket (S3 Express One Zone, named `…--x-s3`) lists keys out of order and takes
  // no StartAfter: it is listed along one chain.
  if (!split && chains.length === 1 && chains[0].after !== '' && !s.bucket.endsWith('--x-s3')) {
    chains = await splitChain(client, s, chains[0], alphabet ?? '', LIST_CHAINS, settings);
    split = true;
    alphabet = undefined;
  }
  const want = cursor === null ? Math.min(1000, settings.pageObjects ?? 1000) : (settings.pageObjects ?? 10_000);
  const each = Math.max(1, Math.ceil(want / Math.max(1, chains.length)));
  const listed = await Promise.all(chains.map((c) => listChain(client, s, c, each, settings)));
  const items = listed.flatMap((l) => l.items);
  const next = listed.flatMap((l) => (l.chain ? [l.chain] : []));
  if (!split && next.length > 0) alphabet = alphabetOf(items.map((i) => i.key).map((k) => k.slice(s.prefix.length)));
  return {
    items,
    cursor: { chains: next, split, ...(alphabet === undefined ? {} : { alphabet }) },
    done: next.length === 0,
  };
}

/**
 * List on along `chain` until `want` objects (or its range's end); answers them and the chain to
 * go on with (null: it ended). Keys are asked for URL-encoded (`EncodingType=url`) and decoded,
 * so a key with a CR, a `+` or a space names its object exactly: in plain XML a CR comes back
 * as a LF.
 */
async function listChain(
  client: S3Client,
  s: { bucket: string; prefix: string },
  chain: ListChain,
  want: number,
  settings: ReadSettings,
): Promise<{ items: ItemInput[]; chain: ListChain | null }> {
  const { ListObjectsV2Command } = await sdk();
  const items: ItemInput[] = [];
  let { after, token } = chain;
  for (;;) {
    const command = new ListObjectsV2Command({
      Bucket: s.bucket,
      Prefix: s.prefix,
      MaxKeys: Math.min(1000, want - items.length),
      ContinuationToken: token ?? undefined,
      StartAfter: token === null && after !== '' ? after : undefined,
      EncodingType: 'url',
    });
    const r = await s3Call(settings, (abortSignal) => client.send(command, { abortSignal }));
    for (const o of r.Contents ?? []) {
      if (o.Key === undefined) continue;
      const key = listedKey(o.Key, r.EncodingType);
      // Past the range: the next chain lists it.
      if (chain.until !== null && compareKeys(key, chain.until) > 0) return { items, chain: null };
      items.push({ key, input: { bucket: s.bucket, key, size: o.Size ?? 0, etag: o.ETag ?? '' } });
      after = key;
    }
    token = r.IsTruncated && r.NextContinuationToken ? r.NextContinuationToken : null;
    if (token === null) return { items, chain: null };
    if (items.length >= want) return { items, chain: { after, token, until: chain.until } };
  }
}

/** The printable ASCII characters of `keys` (after the prefix), sorted: the digits the cuts are written in. */
function alphabetOf(keys: string[]): string {
  const seen = new Set<number>();
  for (const k of keys) for (let i = 0; i < k.length; i++) seen.add(k.charCodeAt(i));
  return String.fromCharCode(...[...seen].filter((c) => c >= 0x20 && c <= 0x7e).sort((a, b) => a - b));
}

/**
 * Cut the rest of a listing, the keys after `chain.after`, into up to `n` chains. The last key is
 * estimated by one-key listings (a binary search per character, {@link lastKeyNear}); the cuts
 * are spaced evenly between the two keys as numbers written in `alphabet`. When there is no room
 * (the keys end near), the chain goes on alone.
 */
async function splitChain(
  client: S3Client,
  s: { bucket: string; prefix: string },
  chain: ListChain,
  alphabet: string,
  n: number,
  settings: ReadSettings,
): Promise<ListChain[]> {
  const last = await lastKeyNear(client, s, chain.after, settings);
  const cuts = cutsBetween(chain.after, last, alphabet, n);
  if (cuts.length === 0) return [chain];
  return [
    { ...chain, until: cuts[0] },
    ...cuts.map((after, i) => ({ after, token: null, until: i + 1 < cuts.length ? cuts[i + 1] : chain.until })),
  ];
}

/** The first key of the prefix after `after`, or null (a one-key listing). */
async function firstAfter(
  client: S3Client,
  s: { bucket: string; prefix: string },
  after: string,
  settings: ReadSettings,
): Promise<string | null> {
  const { ListObjectsV2Command } = await sdk();
  const command = new ListObjectsV2Command({
    Bucket: s.bucket,
    Prefix: s.prefix,
    MaxKeys: 1,
    StartAfter: after,
    EncodingType: 'url',
  });
  const r = await s3Call(settings, (abortSignal) => client.send(command, { abortSignal }));
  const key = r.Contents?.[0]?.Key;
  return key === undefined ? null : listedKey(key, r.EncodingType);
}

/**
 * About the last key of the prefix: from `from`, a known key, character by character, the
 * largest printable character any later key has there, down to 3 characters past the first that
 * differs from `from`. One one-key listing asks whether any later key has a larger character
 * there at all (a character every remaining key shares costs just that one); only then a binary
 * search over one-key listings, jumping to the key each one answers. At most 64 listings.
 */
async function lastKeyNear(
  client: S3Client,
  s: { bucket: string; prefix: string },
  from: string,
  settings: ReadSettings,
): Promise<string> {
  let last = from;
  let probes = 0;
  let differs = -1;
  for (let j = s.prefix.length; j < last.length && probes < 64; j++) {
    const base = last.slice(0, j);
    let lo = last.charCodeAt(j);
    let hi = 0x7e;
    for (let first = true; lo < hi && probes < 64; first = false) {
      const mid = first ? lo + 1 : (lo + hi + 1) >> 1;
      probes++;
      const k = await firstAfter(client, s, base + String.fromCharCode(mid), settings);
      if (k === null) hi = mid - 1;
      else if (k.startsWith(base)) {
        last = k;
        lo = Math.max(mid, k.charCodeAt(j));
      } else {
        // A key past every key that starts with `base`: an estimate is enough.
        return k;
      }
    }
    if (differs === -1 && last.charCodeAt(j) !== from.charCodeAt(j)) differs = j;
    if (differs !== -1 && j >= differs + 2) break;
  }
  return last;
}

/**
 * Up to `n - 1` keys strictly between `lo` and `hi` (S3's order), evenly spaced when the keys
 * past their common start are read as 3-digit numbers in `alphabet` (its characters in order).
 */
function cutsBetween(lo: string, hi: string, alphabet: string, n: number): string[] {
  let common = 0;
  while (common < lo.length && common < hi.length && lo[common] === hi[common]) common++;
  // Never between the two halves of a surrogate pair.
  if (common > 0 && /[\uD800-\uDBFF]/.test(lo[common - 1])) common--;
  const digits = alphabet.length >= 2 ? alphabet : ' ~';
  const base = digits.length;
  const digit = (k: string, i: number): number => {
    const c = k[common + i];
    if (c === undefined) return 0;
    let d = 0;
    while (d + 1 < base && digits[d + 1] <= c) d++;
    return d;
  };
  const width = 3;
  const value = (k: string) => digit(k, 0) * base * base + digit(k, 1) * base + digit(k, 2);
  const from = value(lo);
  const to = value(hi);
  const cuts: string[] = [];
  let prev = lo;
  for (let i = 1; i < n; i++) {
    let v = from + Math.floor(((to - from) * i) / n);
    let cut = '';
    for (let p = 0; p < width; p++, v = Math.floor(v / base)) cut = digits[v % base] + cut;
    cut = lo.slice(0, common) + cut;
    if (compareKeys(cut, prev) > 0 && compareKeys(cut, hi) < 0) {
      cuts.push(cut);
      prev = cut;
    }
  }
  return cuts;
}
