// Where outbox deliveries may go: only to public addresses, unless an allow-list says otherwise.
// Tenants name their webhook endpoints; without this guard a tenant could make leasehold POST
// from inside the VPC to the cloud metadata address, a database, or anything else not meant to
// be reached from outside (server-side request forgery).
//
// Addresses are classified by ipaddr.js (its special-purpose ranges cover RFC 6890's registries);
// what it does not flag is added below with the RFC that defines it. Registration refuses what
// it can see (address literals, special-use names, names resolving to non-public addresses);
// delivery checks every address a name resolves to inside the connection's own DNS lookup, so
// the socket goes to exactly the address that was checked (no second resolution to rebind).
import { lookup as dnsLookup } from 'node:dns/promises';
import { isIP, type LookupFunction } from 'node:net';
import ipaddr from 'ipaddr.js';
import type { Dispatcher } from 'undici';
import { LeaseholdError, InvalidSettingError } from '../errors.js';
import { normalHost, OUTBOX_ALLOW_VARIABLE, readOutboxAllow } from './outbox-allow.js';

export { OUTBOX_ALLOW_VARIABLE } from './outbox-allow.js';

type Address = ipaddr.IPv4 | ipaddr.IPv6;

/** A parsed allow-list ({@link parseOutboxAllow}). */
export interface OutboxAllowList {
  /** Host names allowed as they are (lowercase, no trailing dot): neither checked nor resolved by the guard. */
  readonly hosts: ReadonlySet<string>;
  /** Address ranges allowed although not public: `[network, prefix length]`. */
  readonly ranges: readonly (readonly [Address, number])[];
}

/** An endpoint's address is not public and not allow-listed. Delivery records it as the endpoint's error. */
export class EndpointRefusedError extends LeaseholdError {
  constructor(message: string) {
    super('endpoint_refused', message);
  }
}

/** Resolves a host name to every address it has (the shape of `dns.promises.lookup(host, { all: true })`). */
export type AddressLookup = (hostname: string) => Promise<{ address: string; family: number }[]>;

/**
 * Parse an allow-list: host names, IP addresses and CIDR ranges (`10.1.0.0/16`, `fd00::/8`),
 * separated by commas or whitespace when given as one string. An allow-listed host name skips
 * every check for URLs with exactly that host; an address or range allows those addresses
 * whatever name they are reached by (an IPv4 range also covers the IPv4-mapped IPv6 form).
 * The syntax is outbox-allow.ts's ({@link readOutboxAllow}).
 * @throws {InvalidSettingError} an entry that is none of those, named in the message.
 */
export function parseOutboxAllow(entries: string | readonly string[] | undefined): OutboxAllowList {
  const { hosts, addresses } = readOutboxAllow(entries);
  const ranges = addresses.map(({ ip, bits, entry }): readonly [Address, number] => {
    try {
      if (bits === undefined) {
        const a = ipaddr.parse(ip);
        return [a, a.kind() === 'ipv4' ? 32 : 128];
      }
      return ipaddr.parseCIDR(`${ip}/${bits}`);
    } catch {
      throw new InvalidSettingError(`"${entry}"`, bits === undefined ? 'is not a valid IP address' : 'is not a valid CIDR range');
    }
  });
  return { hosts, ranges };
}

/** What ipaddr.js's special-purpose range names mean, for the refusal message. */
const RANGE_NAMES: Record<string, string> = {
  unspecified: 'an unspecified ("this network") address (RFC 1122, RFC 4291)',
  broadcast: 'the limited broadcast address (RFC 919)',
  multicast: 'a multicast address (RFC 5771, RFC 4291)',
  linkLocal: 'a link-local address (RFC 3927, RFC 4291; 169.254.169.254 is the cloud metadata service)',
  loopback: 'a loopback address (RFC 1122, RFC 4291)',
  carrierGradeNat: 'a carrier-grade NAT shared address (RFC 6598)',
  private: 'a private address (RFC 1918)',
  reserved: 'a reserved or documentation address (RFC 6890, RFC 5737, RFC 3849, RFC 9637)',
  benchmarking: 'a benchmarking address (RFC 2544, RFC 5180)',
  as112: 'an AS112 DNS sink address (RFC 7534, RFC 7535)',
  as112v6: 'an AS112 DNS sink address (RFC 7534, RFC 7535)',
  amt: 'an AMT relay anycast address (RFC 7450)',
  uniqueLocal: 'a unique-local address (RFC 4193)',
  ipv4Mapped: 'an IPv4-mapped IPv6 address (RFC 4291), which reaches the IPv4 host it embeds',
  rfc6145: 'an IPv4-translated address (RFC 6145), which reaches the IPv4 host it embeds',
  rfc6052: 'a NAT64 address (RFC 6052, RFC 8215), which reaches the IPv4 host it embeds',
  '6to4': 'a 6to4 address (RFC 3056), which reaches the IPv4 host it embeds',
  teredo: 'a Teredo address (RFC 4380), which reaches the IPv4 host it embeds',
  deprecatedSiteLocal: 'a site-local address (deprecated, RFC 3879)',
  discard: 'a discard-only address (RFC 6666)',
  deprecatedOrchid: 'an ORCHID address (RFC 4843)',
  orchid2: 'an ORCHIDv2 address (RFC 7343)',
  droneRemoteIdProtocolEntityTags: 'a drone remote ID tag (RFC 9374)',
  segmentRouting: 'an SRv6 segment identifier (RFC 9602)',
};

// ipaddr.js does not flag ::/96 (IPv4-compatible, deprecated by RFC 4291 §2.5.5.1: `[::127.0.0.1]`)
// nor the rest of the IETF-reserved 0000::/8 and other unallocated space. RFC 4291 §2.4 and the
// IANA IPv6 address space registry allocate global unicast only from 2000::/3: anything outside
// it is not a public address.
const GLOBAL_UNICAST_V6 = ipaddr.parseCIDR('2000::/3');

/**
 * Why `address` (an IP address in any form Node or a resolver gives: dotted quad, IPv6 with or
 * without a zone id) may not be connected to — or undefined when it is public or allow-listed.
 * Public means: IPv4 outside every special-purpose range; IPv6 inside 2000::/3 and outside
 * every special-purpose range (IPv4-mapped, NAT64, 6to4 and Teredo forms are all refused, so
 * no IPv6 spelling reaches a private IPv4 host).
 */
export function addressRefusal(address: string, allow: OutboxAllowList): string | undefined {
  let a: Address;
  try {
    a = ipaddr.parse(normalHost(address));
  } catch {
    return `${address} is not an IP address`;
  }
  if (allowed(a, allow)) return undefined;
  const range = a.range();
  if (range !== 'unicast') return `${address} is ${RANGE_NAMES[range] ?? `in the special-purpose range "${range}"`}`;
  if (a.kind() === 'ipv6' && !a.match(GLOBAL_UNICAST_V6)) {
    return `${address} is outside the global unicast block 2000::/3 (RFC 4291; this includes IPv4-compatible ::/96)`;
  }
  return undefined;
}

function allowed(a: Address, allow: OutboxAllowList): boolean {
  const v4 = a.kind() === 'ipv6' && (a as ipaddr.IPv6).isIPv4MappedAddress() ? (a as ipaddr.IPv6).toIPv4Address() : undefined;
  return allow.ranges.some(
    ([net, bits]) =>
      (net.kind() === a.kind() && a.match(net, bits)) || (v4 !== undefined && net.kind() === 'ipv4' && v4.match(net, bits)),
  );
}

// Names that only ever mean something on a local network (RFC 6761 §6.3 localhost, RFC 6762
// .local, RFC 8375 .home.arpa; .internal is reserved for private use by ICANN since 2024).
const LOCAL_NAME = /(^|\.)(localhost|local|home\.arpa|internal)$/;

/**
 * Why a URL host may not be connected to, from the host alone (no DNS), or undefined when it is
 * allow-listed, a public address literal, or a name that must be resolved to tell.
 * `host` is a URL's `hostname` (IPv6 in brackets or not).
 */
export function hostRefusal(host: string, allow: OutboxAllowList): string | undefined {
  const h = normalHost(host);
  if (allow.hosts.has(h)) return undefined;
  if (isIP(h)) return addressRefusal(h, allow);
  if (LOCAL_NAME.test(h)) return `${h} is a special-use name of local networks (RFC 6761, RFC 6762, RFC 8375)`;
  return undefined;
}

/** Settings of an {@link EndpointGuard}. */
export interface EndpointGuardOptions {
  /**
   * Hosts, addresses and CIDR ranges allowed although not public (see {@link parseOutboxAllow}).
   * Default: the environment variable `LEASEHOLD_OUTBOX_ALLOW` (comma-separated), read when
   * used; unset means none.
   */
  allow?: string | readonly string[];
  /** Resolves names. Default `dns.promises.lookup(host, { all: true })`. */
  lookup?: AddressLookup;
  /** Longest wait for a name's addresses when checking a registration, ms. Default 2,000. */
  resolveTimeoutMs?: number;
}

const systemLookup: AddressLookup = (hostname) => dnsLookup(hostname, { all: true });

/**
 * The policy of where outbox deliveries may connect, and an HTTP dispatcher that enforces it.
 *
 * - {@link EndpointGuard.refusal}: registration's check of one endpoint URL.
 * - {@link EndpointGuard.dispatcher}: an undici `Agent` whose every new connection is checked:
 *   an address literal before connecting; a name inside the socket's own DNS lookup, where every
 *   resolved address must pass and the socket connects to one of exactly those addresses.
 *   Redirects are never followed by it (undici's `request` does not follow them), so a 3xx
 *   answer is a failed delivery and cannot point the POST elsewhere.
 */
export class EndpointGuard {
  private readonly lookup: AddressLookup;
  private readonly resolveTimeoutMs: number;
  private readonly fixed: OutboxAllowList | undefined;
  private cached: { text: string; list: OutboxAllowList } | undefined;
  private agent: Promise<Dispatcher> | undefined;

  /** @throws {InvalidSettingError} an `allow` entry that does not parse, or a negative `resolveTimeoutMs`. */
  constructor(options: EndpointGuardOptions = {}) {
    this.lookup = options.lookup ?? systemLookup;
    this.resolveTimeoutMs = options.resolveTimeoutMs ?? 2_000;
    if (!(this.resolveTimeoutMs >= 0))
      throw new InvalidSettingError('resolveTimeoutMs', `must be 0 or more ms, got ${options.resolveTimeoutMs}`);
    this.fixed = options.allow === undefined ? undefined : parseOutboxAllow(options.allow);
  }

  /**
   * The allow-list in force: the `allow` option, else `LEASEHOLD_OUTBOX_ALLOW` as it is now.
   * @throws {InvalidSettingError} the variable holds an entry that does not parse (named with the variable).
   */
  allowList(): OutboxAllowList {
    if (this.fixed) return this.fixed;
    const text = process.env[OUTBOX_ALLOW_VARIABLE] ?? '';
    if (this.cached?.text !== text) {
      try {
        this.cached = { text, list: parseOutboxAllow(text) };
      } catch (e) {
        throw new InvalidSettingError(
          OUTBOX_ALLOW_VARIABLE,
          (e as Error).message,
          'invalid_setting',
          `${OUTBOX_ALLOW_VARIABLE}: ${(e as Error).message}`,
        );
      }
    }
    return this.cached.list;
  }

  /**
   * Why the endpoint `url` is refused at registration, or undefined. Refuses address literals
   * that are not public, special-use local names, and names that resolve (within
   * `resolveTimeoutMs`) to any address that is not public. A name that does not resolve now is
   * accepted: DNS may be set up later, and delivery checks every address anyway.
   */
  async refusal(url: string): Promise<string | undefined> {
    const allow = this.allowList();
    let name: string;
    try {
      name = new URL(url).hostname;
    } catch {
      return 'must be an absolute http:// or https:// URL';
    }
    const host = normalHost(name);
    if (allow.hosts.has(host)) return undefined;
    const direct = hostRefusal(host, allow);
    if (direct !== undefined || isIP(host)) return direct && refusalText(direct);
    let addresses: { address: string }[];
    try {
      // Resolved as written: a trailing dot keeps the name absolute (no search domains).
      addresses = await withTimeout(this.lookup(name), this.resolveTimeoutMs);
    } catch {
      return undefined;
    }
    for (const { address } of addresses) {
      const why = addressRefusal(address, allow);
      if (why !== undefined) return refusalText(`${host} resolves to ${why}`);
    }
    return undefined;
  }

  /**
   * The addresses of `hostname`, every one checked.
   * @throws {EndpointRefusedError} one is not public and not allow-listed.
   * @throws the resolver's error (e.g. `ENOTFOUND`).
   */
  async resolve(hostname: string): Promise<{ address: string; family: number }[]> {
    const allow = this.allowList();
    const host = normalHost(hostname);
    const direct = hostRefusal(host, allow);
    if (direct !== undefined) throw new EndpointRefusedError(refusalText(direct));
    const addresses = await this.lookup(hostname);
    if (addresses.length === 0) throw Object.assign(new Error(`${host}: no address`), { code: 'ENOTFOUND' });
    if (allow.hosts.has(host)) return addresses;
    for (const { address } of addresses) {
      const why = addressRefusal(address, allow);
      if (why !== undefined) throw new EndpointRefusedError(refusalText(`${host} resolves to ${why}`));
    }
    return addresses;
  }

  /**
   * The undici dispatcher deliveries use (created on first use, then shared): connections time
   * out after `connectTimeoutMs`; every connection is checked as the class describes.
   */
  dispatcher(connectTimeoutMs: number): Promise<Dispatcher> {
    this.agent ??= import('undici').then(({ Agent, buildConnector }) => {
      const lookup: LookupFunction = (hostname, options, callback) => {
        this.resolve(hostname).then(
          (addresses) => {
            if (options.all) callback(null, addresses);
            else callback(null, addresses[0].address, addresses[0].family);
          },
          (error: NodeJS.ErrnoException) => callback(error, '', 0),
        );
      };
      // net.connect and tls.connect call `lookup` for names only; literals are checked here.
      const base = buildConnector({ timeout: connectTimeoutMs, lookup });
      return new Agent({
        connect: (options, callback) => {
          let refused: string | undefined;
          try {
            refused = isIP(normalHost(options.hostname)) ? hostRefusal(options.hostname, this.allowList()) : undefined;
          } catch (e) {
            refused = (e as Error).message;
          }
          if (refused !== undefined) callback(new EndpointRefusedError(refusalText(refused)), null);
          else base(options, callback);
        },
      });
    });
    return this.agent;
  }
}

function refusalText(why: string): string {
  return `${why}: not a public address (allow it with ${OUTBOX_ALLOW_VARIABLE} if it is meant to be reached)`;
}

async function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([p, late]);
  } finally {
    clearTimeout(timer);
  }
}
