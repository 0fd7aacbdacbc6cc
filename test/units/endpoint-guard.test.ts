// Where outbox deliveries may connect: address classification (ipaddr.js plus what it lacks),
// the allow-list, and the setting that carries it. No database: pure functions and a resolver stand-in.
import { afterEach, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/runtime/config.js';
import { addressRefusal, EndpointGuard, hostRefusal, parseOutboxAllow } from '../../src/units/endpoint-guard.js';
import { readOutboxAllow } from '../../src/units/outbox-allow.js';
import { isIP } from 'node:net';
import ipaddr from 'ipaddr.js';

const none = parseOutboxAllow(undefined);

describe('addressRefusal', () => {
  const refused: [string, RegExp][] = [
    ['127.0.0.1', /loopback/],
    ['127.255.255.254', /loopback/],
    ['::1', /loopback/],
    ['10.0.0.5', /private address \(RFC 1918\)/],
    ['172.16.0.1', /private/],
    ['192.168.255.255', /private/],
    ['169.254.169.254', /link-local/],
    ['fe80::1%eth0', /link-local/],
    ['100.64.0.0', /carrier-grade NAT shared address \(RFC 6598\)/],
    ['100.127.255.255', /carrier-grade NAT/],
    ['fc00::1', /unique-local/],
    ['fd00:ec2::254', /unique-local/],
    ['::ffff:127.0.0.1', /IPv4-mapped/],
    ['::ffff:8.8.8.8', /IPv4-mapped/],
    ['::7f00:1', /outside the global unicast block/],
    ['::', /unspecified/],
    ['0.0.0.0', /unspecified/],
    ['0.1.2.3', /unspecified/],
    ['224.0.0.251', /multicast/],
    ['ff05::2', /multicast/],
    ['255.255.255.255', /broadcast/],
    ['240.0.0.1', /reserved/],
    ['192.0.0.8', /reserved/],
    ['203.0.113.9', /documentation/],
    ['2001:db8::1', /documentation/],
    ['3fff::1', /documentation/],
    ['64:ff9b::808:808', /NAT64/],
    ['64:ff9b:1::1', /NAT64/],
    ['2002:c000:0204::1', /6to4/],
    ['2001:0:4136:e378::1', /Teredo/],
    ['100::1', /discard-only/],
    ['fec0::1', /site-local/],
    ['5f00::1', /SRv6/],
    ['4000::1', /outside the global unicast block/],
    ['not-an-address', /is not an IP address/],
  ];
  for (const [address, why] of refused) {
    it(`refuses ${address}`, () => {
      expect(addressRefusal(address, none)).toMatch(why);
    });
  }

  it('accepts public IPv4 and IPv6 addresses', () => {
    for (const a of [
      '93.184.215.14',
      '8.8.8.8',
      '1.1.1.1',
      '100.63.255.255',
      '100.128.0.0',
      '172.32.0.1',
      '2606:2800:21f:cb07:6820:80da:af6b:8b2c',
      '2a00:1450:4001:82a::200e',
    ]) {
      expect(addressRefusal(a, none), a).toBeUndefined();
    }
  });

  it('accepts what the allow-list covers, IPv4 ranges in their IPv4-mapped form too', () => {
    const allow = parseOutboxAllow('127.0.0.1, 10.0.0.0/8 fd00::/8,[::1]');
    for (const a of ['127.0.0.1', '::ffff:127.0.0.1', '10.9.8.7', '::ffff:10.0.0.1', 'fd12::3', '::1'])
      expect(addressRefusal(a, allow), a).toBeUndefined();
    for (const a of ['127.0.0.2', '192.168.0.1', 'fe80::1']) expect(addressRefusal(a, allow), a).toBeDefined();
  });
});

describe('hostRefusal', () => {
  it('refuses special-use local names and checks literals, leaving other names to resolution', () => {
    for (const host of [
      'localhost',
      'LOCALHOST.',
      'a.localhost',
      'printer.local',
      'router.home.arpa',
      'metadata.google.internal',
    ]) {
      expect(hostRefusal(host, none), host).toMatch(/special-use name/);
    }
    expect(hostRefusal('[::1]', none)).toMatch(/loopback/);
    expect(hostRefusal('hooks.example.com', none)).toBeUndefined();
    expect(hostRefusal('localhost', parseOutboxAllow('localhost'))).toBeUndefined();
  });
});

describe('parseOutboxAllow', () => {
  it('takes host names, addresses and CIDR ranges, separated by commas or spaces', () => {
    const list = parseOutboxAllow('sink.internal, Hooks.Example.COM. 10.0.0.0/8,[::1], fd00::/8');
    expect([...list.hosts]).toEqual(['sink.internal', 'hooks.example.com']);
    expect(list.ranges.map(([a, bits]) => `${a.toString()}/${bits}`)).toEqual(['10.0.0.0/8', '::1/128', 'fd00::/8']);
  });

  it('refuses an entry that is none of those, naming it', () => {
    for (const [entry, message] of [
      ['10.0.0.0/33', /"10\.0\.0\.0\/33" is not a valid CIDR range/],
      ['0x7f.1', /"0x7f\.1" is neither/],
      ['2130706433', /"2130706433" is neither/],
      ['http://sink', /"http:\/\/sink" is neither/],
      ['-bad-', /"-bad-" is neither/],
      ['a/8', /"a\/8" is neither/],
    ] as const) {
      expect(() => parseOutboxAllow(entry), entry).toThrow(message);
    }
  });

  it('the syntax check a cold start runs accepts exactly the entries ipaddr.js reads', () => {
    // loadConfig and outboxDelivery() check an allow-list with readOutboxAllow (no ipaddr.js);
    // the guard makes its ranges with ipaddr.js. What ipaddr.js takes, as the guard read an
    // entry before the check had a file of its own:
    const ipaddrTakes = (entry: string) => {
      const slash = entry.indexOf('/');
      const ip = (slash === -1 ? entry : entry.slice(0, slash)).replace(/^\[(.*)\]$/, '$1');
      if (!isIP(ip)) return undefined; // not an address: the host-name rules apply
      if (slash !== -1) return ipaddr.isValidCIDR(`${ip}${entry.slice(slash)}`);
      try {
        ipaddr.parse(ip);
        return true;
      } catch {
        return false;
      }
    };
    for (const entry of [
      'sink.internal',
      'Hooks.Example.COM.',
      '127.0.0.1',
      '[::1]',
      '::ffff:10.0.0.1',
      '::ffff:10.0.0.0/104',
      '10.0.0.0/8',
      '10.0.0.0/08',
      '10.0.0.0/0',
      '10.0.0.0/32',
      '10.0.0.0/33',
      '10.0.0.0/',
      '10.0.0.0/8/8',
      '10.0.0.0/-1',
      '10.0.0.0/ 8',
      '10.0.0.0/1e1',
      'fd00::/8',
      'fd00::/128',
      'fd00::/129',
      '[fd00::]/8',
      'fe80::1%eth0',
      'fe80::1%eth0/64',
      'fe80::1%a-b',
      'fe80::1%a-b/64',
      'fe80::1%',
      '0x7f.1',
      '2130706433',
      'http://sink',
      '-bad-',
      'a/8',
      'a_b.example',
    ]) {
      const takes = ipaddrTakes(entry);
      if (takes === undefined) continue;
      let read: boolean;
      try {
        read = readOutboxAllow(entry).addresses.length === 1;
      } catch {
        read = false;
      }
      expect(read, entry).toBe(takes);
      // ...and the guard's parse takes it as well, or refuses it as the check does.
      if (takes) expect(parseOutboxAllow(entry).ranges).toHaveLength(1);
      else expect(() => parseOutboxAllow(entry), entry).toThrow(/is not a valid (IP address|CIDR range)/);
    }
  });
});

describe('LEASEHOLD_OUTBOX_ALLOW', () => {
  const saved = process.env.LEASEHOLD_OUTBOX_ALLOW;
  afterEach(() => {
    if (saved === undefined) delete process.env.LEASEHOLD_OUTBOX_ALLOW;
    else process.env.LEASEHOLD_OUTBOX_ALLOW = saved;
  });

  it('is validated when a function starts: a bad entry stops it with a message naming the variable', () => {
    const env = { DATABASE_URL: 'postgres://u@h/db', LEASEHOLD_OUTBOX_ALLOW: '10.0.0.0/8, not a/cidr' };
    expect(() => loadConfig(env)).toThrow(ConfigError);
    expect(() => loadConfig(env)).toThrow(/^LEASEHOLD_OUTBOX_ALLOW: "a\/cidr" is neither/);
    expect(() => loadConfig({ ...env, LEASEHOLD_OUTBOX_ALLOW: '127.0.0.1,sink.internal' })).not.toThrow();
  });

  it('is read by a guard without an allow option whenever it checks, and a bad value names it', async () => {
    const guard = new EndpointGuard({ lookup: async () => [{ address: '10.0.0.7', family: 4 }] });
    delete process.env.LEASEHOLD_OUTBOX_ALLOW;
    expect(await guard.refusal('http://hooks.corp.example/x')).toMatch(
      /hooks\.corp\.example resolves to 10\.0\.0\.7 is a private address/,
    );
    process.env.LEASEHOLD_OUTBOX_ALLOW = '10.0.0.0/24';
    expect(await guard.refusal('http://hooks.corp.example/x')).toBeUndefined();
    await expect(guard.resolve('hooks.corp.example')).resolves.toEqual([{ address: '10.0.0.7', family: 4 }]);
    process.env.LEASEHOLD_OUTBOX_ALLOW = '10.0.0.0/99';
    await expect(guard.refusal('http://hooks.corp.example/x')).rejects.toThrow(
      /^LEASEHOLD_OUTBOX_ALLOW: "10\.0\.0\.0\/99" is not a valid CIDR range/,
    );
  });
});

describe('EndpointGuard.refusal (registration)', () => {
  it('accepts a name whose lookup fails or takes longer than resolveTimeoutMs; delivery checks it again', async () => {
    const failing = new EndpointGuard({
      allow: [],
      lookup: async () => Promise.reject(Object.assign(new Error('ENOTFOUND'), { code: 'ENOTFOUND' })),
    });
    expect(await failing.refusal('https://later.example/hook')).toBeUndefined();
    const hanging = new EndpointGuard({ allow: [], lookup: () => new Promise(() => {}), resolveTimeoutMs: 50 });
    expect(await hanging.refusal('https://slow.example/hook')).toBeUndefined();
  });

  it('refuses a name when any of its addresses is not public', async () => {
    const guard = new EndpointGuard({
      allow: [],
      lookup: async () => [
        { address: '93.184.215.14', family: 4 },
        { address: '::1', family: 6 },
      ],
    });
    expect(await guard.refusal('https://dual.example/')).toMatch(/dual\.example resolves to ::1 is a loopback address/);
    await expect(guard.resolve('dual.example')).rejects.toMatchObject({ code: 'endpoint_refused' });
  });
});
