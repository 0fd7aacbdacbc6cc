// HTTP dates as RFC 9110 (section 5.6.7, "Date/Time Formats") defines them, for Retry-After
// (docs/design.md, "Retry-After"): read by strict patterns, never by Date.parse's lenient guess,
// which takes any text holding a year ("retry 2030", "Error 503") for a date.

const DAYS = ['Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat', 'Sun'] as const;
const LONG_DAYS = ['Monday', 'Tuesday', 'Wednesday', 'Thursday', 'Friday', 'Saturday', 'Sunday'] as const;
const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'] as const;
const DAY = DAYS.join('|');
const MONTH = MONTHS.join('|');
const TIME = '(\\d{2}):(\\d{2}):(\\d{2})';

/** IMF-fixdate, the preferred form: `Sun, 06 Nov 1994 08:49:37 GMT`. */
const IMF_FIXDATE = new RegExp(`^(?:${DAY}), (\\d{2}) (${MONTH}) (\\d{4}) ${TIME} GMT$`);
/** The obsolete RFC 850 form, a two-digit year: `Sunday, 06-Nov-94 08:49:37 GMT`. */
const RFC_850 = new RegExp(`^(?:${LONG_DAYS.join('|')}), (\\d{2})-(${MONTH})-(\\d{2}) ${TIME} GMT$`);
/** The obsolete asctime form, the day padded with a space: `Sun Nov  6 08:49:37 1994`. */
const ASCTIME = new RegExp(`^(?:${DAY}) (${MONTH}) ( \\d|\\d{2}) ${TIME} (\\d{4})$`);

/**
 * An HTTP date (RFC 9110, section 5.6.7: IMF-fixdate, or the obsolete RFC 850 and asctime forms;
 * names case-sensitive, as the grammar has them) as ms since the epoch; undefined for any other
 * text or an impossible date (`31 Feb`, hour 24). An RFC 850 two-digit year that would be more
 * than 50 years after `nowMs` is taken in the century before, as the RFC requires. The day name is
 * not checked against the date.
 */
export function parseHttpDate(value: string, nowMs = Date.now()): number | undefined {
  let m = IMF_FIXDATE.exec(value);
  if (m) return utc(Number(m[3]), m[2], Number(m[1]), m.slice(4));
  m = RFC_850.exec(value);
  if (m) {
    const nowYear = new Date(nowMs).getUTCFullYear();
    let year = nowYear - (nowYear % 100) + Number(m[3]);
    if (year > nowYear + 50) year -= 100;
    return utc(year, m[2], Number(m[1]), m.slice(4));
  }
  m = ASCTIME.exec(value);
  if (m) return utc(Number(m[6]), m[1], Number(m[2].trim()), m.slice(3, 6));
  return undefined;
}

/** The instant of a date and `[hh, mm, ss]`, or undefined when no such moment exists. */
function utc(year: number, month: string, day: number, time: string[]): number | undefined {
  const [h, min, s] = time.map(Number);
  const mon = MONTHS.indexOf(month as (typeof MONTHS)[number]);
  // 60: a leap second, which the grammar allows.
  if (h > 23 || min > 59 || s > 60) return undefined;
  const at = Date.UTC(year, mon, day, h, min, s);
  // Date.UTC rolls 31 Feb over into March: a date that does not come back as written is none.
  if (new Date(at).getUTCDate() !== day || new Date(at).getUTCMonth() !== mon) return undefined;
  return at;
}

/**
 * An HTTP `Retry-After` value as ms from now: delay-seconds (`"120"`) or an HTTP date
 * (`"Wed, 21 Oct 2015 07:28:00 GMT"`, whose distance from `nowMs` is taken, 0 when past) in one
 * of RFC 9110's three forms, read strictly ({@link parseHttpDate}). Undefined for a missing or
 * unreadable value (any other text, such as `"retry 2030"`, is no date). Values past `capMs` (default one day) are capped,
 * not ignored.
 */
export function parseRetryAfter(value: string | null | undefined, nowMs = Date.now(), capMs = 86_400_000): number | undefined {
  if (value === null || value === undefined) return undefined;
  const v = value.trim();
  if (/^\d+$/.test(v)) return Math.min(Number(v) * 1000, capMs);
  const at = parseHttpDate(v, nowMs);
  if (at === undefined) return undefined;
  return Math.min(Math.max(0, at - nowMs), capMs);
}
