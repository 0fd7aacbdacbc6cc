// A primary PostgreSQL and a streaming standby of it (pg_basebackup), each a server of its own in
// a temporary folder, for failover tests; and a TCP proxy whose upstream can be switched, the way
// a database endpoint's DNS name moves to the new writer while connections already open stay with
// the old one. Uses the machine's PostgreSQL binaries (`pg_config --bindir`, else
// /usr/lib/postgresql/<n>/bin); as root the servers run as the `postgres` user.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync, chmodSync, chownSync } from 'node:fs';
import { connect as netConnect, createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from '../../src/store/index.js';

/** The folder of the machine's PostgreSQL server binaries, or undefined when there is none. */
export function postgresBinDir(): string | undefined {
  const r = spawnSync('pg_config', ['--bindir'], { encoding: 'utf8' });
  const fromConfig = r.status === 0 ? r.stdout.trim() : '';
  if (fromConfig && existsSync(join(fromConfig, 'initdb'))) return fromConfig;
  const root = '/usr/lib/postgresql';
  if (!existsSync(root)) return undefined;
  const versions = readdirSync(root).sort((a, b) => Number(b) - Number(a));
  for (const v of versions) if (existsSync(join(root, v, 'bin', 'initdb'))) return join(root, v, 'bin');
  return undefined;
}

/** One server of the pair. */
export interface PairServer {
  port: number;
  /** `postgres://postgres@127.0.0.1:<port>/postgres` */
  url: string;
}

/** A primary and its standby; {@link PgPair.stop} stops both and removes their folders. */
export interface PgPair {
  primary: PairServer;
  standby: PairServer;
  /** Promote the standby (`pg_promote`, waiting for it) and make the old primary read-only. */
  failover(): Promise<void>;
  stop(): void;
}

const isRoot = process.getuid?.() === 0;

function run(bin: string, args: string[]): string {
  const cmd = isRoot ? 'runuser' : bin;
  const argv = isRoot ? ['-u', 'postgres', '--', bin, ...args] : args;
  return execFileSync(cmd, argv, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const a = s.address();
      const port = typeof a === 'object' && a ? a.port : 0;
      s.close(() => resolve(port));
    });
  });
}

/**
 * Start a primary (initdb, trust auth on 127.0.0.1, fast and unsafe settings) and a hot standby
 * streaming from it. Takes a few seconds.
 * @throws when no PostgreSQL binaries are installed or a server does not start.
 */
export async function startPgPair(): Promise<PgPair> {
  const bin = postgresBinDir();
  if (!bin) throw new Error('no PostgreSQL server binaries (initdb) on this machine');
  const root = mkdtempSync(join(tmpdir(), 'leasehold-pair-'));
  chmodSync(root, 0o755);
  if (isRoot) {
    const ids = execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim();
    const gid = execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim();
    chownSync(root, Number(ids), Number(gid));
  }
  const a = join(root, 'a');
  const b = join(root, 'b');
  const [pa, pb] = [await freePort(), await freePort()];
  const started: string[] = [];
  const stop = () => {
    for (const d of started.reverse()) {
      try {
        run(join(bin, 'pg_ctl'), ['-D', d, '-m', 'immediate', '-w', 'stop']);
      } catch {
        // Already stopped.
      }
    }
    rmSync(root, { recursive: true, force: true });
  };
  const flags = (port: number) =>
    `-c port=${port} -c listen_addresses=127.0.0.1 -c unix_socket_directories=${root} -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=100 -c wal_level=replica -c max_wal_senders=5`;
  try {
    run(join(bin, 'initdb'), ['-D', a, '-U', 'postgres', '--auth=trust', '-N']);
    run(join(bin, 'pg_ctl'), ['-D', a, '-o', flags(pa), '-l', join(root, 'a.log'), '-w', 'start']);
    started.push(a);
    run(join(bin, 'pg_basebackup'), ['-h', '127.0.0.1', '-p', String(pa), '-U', 'postgres', '-D', b, '-R', '-X', 'stream']);
    run(join(bin, 'pg_ctl'), ['-D', b, '-o', flags(pb), '-l', join(root, 'b.log'), '-w', 'start']);
    started.push(b);
  } catch (e) {
    stop();
    throw e;
  }
  const server = (port: number): PairServer => ({ port, url: `postgres://postgres@127.0.0.1:${port}/postgres` });
  return {
    primary: server(pa),
    standby: server(pb),
    failover: async () => {
      // A switchover that loses nothing: the old writer turns read-only (sessions pick the new
      // default up at their next transaction), the standby replays all it wrote, then is promoted.
      const old = connect(server(pa).url, { max: 1, applicationName: 'leasehold-test-failover' });
      const next = connect(server(pb).url, { max: 1, applicationName: 'leasehold-test-failover' });
      try {
        await old`alter system set default_transaction_read_only = on`;
        await old`select pg_reload_conf()`;
        for (let last = ''; ;) {
          await new Promise((r) => setTimeout(r, 20));
          const [{ lsn }] = await old<{ lsn: string }[]>`select pg_current_wal_insert_lsn()::text as lsn`;
          const [{ caught }] = await next<{ caught: boolean }[]>`select pg_last_wal_replay_lsn() >= ${lsn}::pg_lsn as caught`;
          if (caught && lsn === last) break;
          last = lsn;
        }
        await next`select pg_promote(true, 30)`;
      } finally {
        await old.end();
        await next.end();
      }
    },
    stop,
  };
}

/** A TCP proxy on 127.0.0.1 whose upstream port can be switched. */
export interface SwitchProxy {
  port: number;
  /** `url` with its host and port replaced by the proxy's. */
  url(url: string): string;
  /** New connections go to `port` from now on; open ones stay where they are. */
  switchTo(port: number): void;
  /** Connections accepted so far, per upstream port. */
  accepted(): Map<number, number>;
  close(): Promise<void>;
}

/** Start a {@link SwitchProxy} in front of `upstreamPort` on 127.0.0.1. */
export async function switchProxy(upstreamPort: number): Promise<SwitchProxy> {
  let upstream = upstreamPort;
  const accepted = new Map<number, number>();
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    const port = upstream;
    accepted.set(port, (accepted.get(port) ?? 0) + 1);
    const up = netConnect(port, '127.0.0.1');
    sockets.add(client).add(up);
    client.pipe(up);
    up.pipe(client);
    const drop = () => {
      sockets.delete(client);
      sockets.delete(up);
      client.destroy();
      up.destroy();
    };
    client.on('error', drop).on('close', drop);
    up.on('error', drop).on('close', drop);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const a = server.address();
  const port = typeof a === 'object' && a ? a.port : 0;
  return {
    port,
    url: (url) => {
      const u = new URL(url);
      u.hostname = '127.0.0.1';
      u.port = String(port);
      return u.toString();
    },
    switchTo: (p) => void (upstream = p),
    accepted: () => new Map(accepted),
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}
