// The syntax of an outbox allow-list (`LEASEHOLD_OUTBOX_ALLOW`, `outboxDelivery({ allow })`):
// host names, IP addresses and CIDR ranges, read without ipaddr.js, so the runtime's configuration
// and the outbox delivery job's factory check it at a cold start without loading the address
// policy (endpoint-guard.ts, which makes the ranges of what this reads; docs/design.md, "Cold
// starts and code splitting").
import { isIP } from 'node:net';
import { InvalidSettingError } from '../errors.js';

/** The environment variable of the default allow-list of outbox endpoints. */
export const OUTBOX_ALLOW_VARIABLE = 'LEASEHOLD_OUTBOX_ALLOW';

/** An allow-list as read ({@link readOutboxAllow}): its host names, and its addresses and ranges as written. */
export interface OutboxAllowEntries {
  /** Host names (lowercase, no trailing dot). */
  hosts: Set<string>;
  /** Each address or range: the address (no brackets), and the prefix length when a range (undefined: one address). */
  addresses: { ip: string; bits: number | undefined; entry: string }[];
}

/**
 * Read an allow-list: host names, IP addresses and CIDR ranges (`10.1.0.0/16`, `fd00::/8`),
 * separated by commas or whitespace when given as one string.
 * @throws {InvalidSettingError} an entry that is none of those, named in the message.
 */
export function readOutboxAllow(entries: string | readonly string[] | undefined): OutboxAllowEntries {
  const list = typeof entries === 'string' ? entries.split(/[\s,]+/) : (entries ?? []);
  const hosts = new Set<string>();
  const addresses: OutboxAllowEntries['addresses'] = [];
  for (const raw of list) {
    const entry = raw.trim();
    if (entry === '') continue;
    const slash = entry.indexOf('/');
    const ip = (slash === -1 ? entry : entry.slice(0, slash)).replace(/^\[(.*)\]$/, '$1');
    const family = isIP(ip);
    if (family) {
      // Only the canonical spellings net.isIP accepts: no `0x7f.1` in an allow-list. A zone
      // index is letters and digits (the form ipaddr.js reads).
      if (ip.includes('%') && !/%[0-9a-z]+$/i.test(ip)) throw notCidr(entry, slash);
      if (slash === -1) {
        addresses.push({ ip, bits: undefined, entry });
        continue;
      }
      const bits = /^\/(\d+)$/.exec(entry.slice(slash));
      const n = bits ? Number(bits[1]) : NaN;
      if (!(n <= (family === 4 ? 32 : 128))) throw notCidr(entry, slash);
      addresses.push({ ip, bits: n, entry });
      continue;
    }
    const host = normalHost(entry);
    // A name URL parsing would read as an address (`0x7f.1`, `2130706433`) is refused here:
    // write addresses in their canonical form.
    if (slash !== -1 || !HOST_NAME.test(host) || urlHost(host) !== host) {
      throw new InvalidSettingError(`"${entry}"`, 'is neither a host name, an IP address nor a CIDR range');
    }
    hosts.add(host);
  }
  return { hosts, addresses };
}

/** An entry with an address that is not a valid one or range. */
function notCidr(entry: string, slash: number): InvalidSettingError {
  return slash === -1
    ? new InvalidSettingError(`"${entry}"`, 'is not a valid IP address')
    : new InvalidSettingError(`"${entry}"`, 'is not a valid CIDR range');
}

const HOST_NAME = /^(?=.{1,253}$)[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?(?:\.[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?)*$/;

/** The host WHATWG URL parsing makes of `host`, or undefined when it is not a valid host. */
function urlHost(host: string): string | undefined {
  try {
    return new URL(`http://${host}/`).hostname;
  } catch {
    return undefined;
  }
}

/** Lowercase, without brackets and without one trailing dot (`Example.COM.` → `example.com`). */
export function normalHost(host: string): string {
  const h = host.toLowerCase().replace(/^\[(.*)\]$/, '$1');
  return h.endsWith('.') ? h.slice(0, -1) : h;
}
