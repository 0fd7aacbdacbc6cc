// A PostgreSQL wire-protocol proxy for fault injection in tests: it forwards bytes between
// clients and the test server, parsing messages in both directions so that it can act on one
// statement: cut the connection after the statement committed, or let the connection go silent.
import { createHash, createHmac, pbkdf2Sync, randomBytes } from 'node:crypto';
import net from 'node:net';
import { mulberry32 } from './random.js';

/** Picks a statement by its SQL text: a pattern, or a predicate (which may count calls). */
export type Matcher = RegExp | ((sql: string) => boolean);

/** One armed fault of a {@link PgProxy}; it fires at most once, on the first matching statement. */
export interface Fault {
  /** Resolves when the fault fires, to the SQL text of the statement it fired on. */
  readonly fired: Promise<string>;
  /** `Date.now()` when it fired; undefined until then. */
  readonly firedAt: number | undefined;
}

// Startup-phase request codes (untyped messages): SSLRequest, GSSENCRequest, CancelRequest.
const SSL_REQUEST = 80877103;
const GSSENC_REQUEST = 80877104;
const CANCEL_REQUEST = 80877102;

/** Random connection kills of a {@link PgProxy}, from {@link PgProxy.chaos}. */
export interface Chaos {
  /** Connections cut so far. */
  readonly kills: number;
  /** Stop cutting (connections cut so far stay cut). */
  stop(): void;
}

/** What the IAM login front of a {@link PgProxy} saw, from {@link PgProxy.iamLogins}. */
export interface IamLogins {
  /** Logins refused with 28000 so far. */
  readonly refused: number;
  /** Logins let through to the server so far. */
  readonly accepted: number;
  /** Every password (token) sent, in order. */
  readonly passwords: readonly string[];
  /** Refuse `n` more logins (added to what is left). */
  refuse(n: number): void;
}

interface Rule {
  kind: 'stall' | 'drop';
  match: (sql: string) => boolean;
  fault: Fault & { firedAt: number | undefined };
  fire: (sql: string) => void;
  done: boolean;
}

/**
 * A fault-injecting proxy in front of the test PostgreSQL (see `test/support/db.ts`). It listens
 * on 127.0.0.1 on a free port and forwards every connection to the server of `target`;
 * {@link PgProxy.url} is `target` with host and port replaced, so pair it with
 * `connect(proxy.url, { schema: db.schema })`. SSL and GSS encryption requests are declined, so
 * the proxy always sees plain protocol messages.
 *
 * Faults (each fires once, on the first statement — a simple `Query` or the `Bind` of an
 * extended-protocol execution — whose SQL text matches):
 * - {@link PgProxy.stallAfterSend}: the statement reaches the server and commits, then the
 *   connection goes silent in both directions while its sockets stay open;
 * - {@link PgProxy.dropAfterCommit}: the statement reaches the server and commits, then the
 *   connection is cut before its answer reaches the client;
 * - {@link PgProxy.killAll} cuts every connection at once;
 * - {@link PgProxy.chaos} cuts connections at random points: before a client message reaches the
 *   server, or in the middle of the server's answer (a transaction's statement, its commit, a
 *   COPY's data, a connection's startup), until stopped.
 *
 * Everything else passes through unchanged. Deterministic: a fault acts on exactly the
 * exchange (up to its `Sync`) that carried the matching statement; earlier answers pipelined on
 * that connection are delivered first.
 */
export class PgProxy {
  /** One line per fired fault: `stall on <sql>` / `drop on <sql>`. */
  readonly log: string[] = [];
  private readonly rules: Rule[] = [];
  private readonly sockets = new Set<net.Socket>();
  private readonly clients = new Set<net.Socket>();
  private cut: { probability: number; random: () => number; kills: number } | undefined;
  private allSilent = false;
  private iam: { left: number; refused: number; accepted: number; passwords: string[] } | undefined;

  private constructor(
    private readonly server: net.Server,
    private readonly target: { host: string; port: number; user: string; password: string },
    /** The URL of the proxied server: `target` with this proxy's host and port. */
    readonly url: string,
  ) {
    server.on('connection', (client) => this.handle(client));
  }

  /**
   * Start a proxy for the server of `targetUrl` (a `postgres://` URL; user, password, database
   * and parameters are kept in {@link PgProxy.url}). Close it with {@link PgProxy.close}.
   */
  static async start(targetUrl: string): Promise<PgProxy> {
    const target = new URL(targetUrl);
    const server = net.createServer();
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve());
    });
    const { port } = server.address() as net.AddressInfo;
    const proxied = new URL(targetUrl);
    proxied.hostname = '127.0.0.1';
    proxied.port = String(port);
    const host = target.hostname.replace(/^\[(.*)\]$/, '$1') || '127.0.0.1';
    const login = { user: decodeURIComponent(target.username) || 'postgres', password: decodeURIComponent(target.password) };
    return new PgProxy(server, { host, port: Number(target.port || 5432), ...login }, proxied.toString());
  }

  /**
   * Arm a stall: the first statement matching `matcher` is forwarded and completes on the
   * server, but from then on nothing passes on that connection in either direction (neither
   * its answer nor any later statement): a connection that stopped answering.
   */
  stallAfterSend(matcher: Matcher): Fault {
    return this.arm('stall', matcher);
  }

  /**
   * Arm a drop: the first statement matching `matcher` is forwarded and completes (commits) on
   * the server; once the server is ready for the next query, the connection is cut without
   * the answer reaching the client: a statement whose outcome the client never learns.
   */
  dropAfterCommit(matcher: Matcher): Fault {
    return this.arm('drop', matcher);
  }

  /**
   * From now on nothing passes in either direction on any connection, open or new (new ones are
   * accepted, then hear nothing): a network path gone silent as a whole, not one connection.
   */
  goSilent(): void {
    this.allSilent = true;
  }

  /** Cut every connection through this proxy now (clients see their connections close). */
  killAll(): void {
    for (const s of this.sockets) s.destroy();
  }

  /**
   * Cut connections at random until {@link Chaos.stop}: each protocol message passing through
   * (either way, after the startup) cuts its connection with `probability`, before it is
   * forwarded. `seed` makes the sequence of decisions repeatable (default 1).
   */
  chaos(options: { probability: number; seed?: number }): Chaos {
    const state = { probability: options.probability, random: mulberry32(options.seed ?? 1), kills: 0 };
    this.cut = state;
    return {
      get kills() {
        return state.kills;
      },
      stop: () => {
        if (this.cut === state) this.cut = undefined;
      },
    };
  }

  /** Whether chaos cuts the connection at this message (counted when it does). */
  private chaosCuts(): boolean {
    const c = this.cut;
    if (!c || c.random() >= c.probability) return false;
    c.kills++;
    return true;
  }

  /**
   * Stand in for RDS's IAM authentication in front of the server, as it behaves at its rate
   * limit: from now on every new connection is asked for a cleartext password (the token), and
   * the first `refuse` logins are refused the way RDS refuses an IAM login it has no capacity
   * for — `FATAL 28000 … too many competing requests`, then the connection closes — before the
   * server sees them; later ones are let through: the proxy answers the server's own
   * authentication (trust, cleartext, MD5 or SCRAM-SHA-256) with the password of the URL it was
   * started with, as RDS logs an accepted token in, so the client's token never reaches the
   * server and any test server will do (the embedded one asks for a password).
   */
  iamLogins(refuse: number): IamLogins {
    const state = { left: refuse, refused: 0, accepted: 0, passwords: [] as string[] };
    this.iam = state;
    return {
      get refused() {
        return state.refused;
      },
      get accepted() {
        return state.accepted;
      },
      get passwords() {
        return state.passwords;
      },
      refuse: (n) => void (state.left += n),
    };
  }

  /** Client connections accepted so far (opened through this proxy since it started). */
  accepted = 0;

  /** Number of client connections open through this proxy. */
  get connections(): number {
    return this.clients.size;
  }

  /** Cut every connection and stop listening. */
  async close(): Promise<void> {
    this.killAll();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private arm(kind: Rule['kind'], matcher: Matcher): Fault {
    const match = typeof matcher === 'function' ? matcher : (sql: string) => matcher.test(sql);
    let resolve!: (sql: string) => void;
    const fault = {
      fired: new Promise<string>((r) => (resolve = r)),
      firedAt: undefined as number | undefined,
    };
    const rule: Rule = {
      kind,
      match,
      fault,
      done: false,
      fire: (sql) => {
        fault.firedAt = Date.now();
        this.log.push(`${kind} on ${sql.replace(/\s+/g, ' ').trim().slice(0, 100)}`);
        resolve(sql);
      },
    };
    this.rules.push(rule);
    return fault;
  }

  /** The rule that fires on `sql`, if any (marked done). */
  private take(sql: string): Rule | undefined {
    for (const r of this.rules) {
      if (!r.done && r.match(sql)) {
        r.done = true;
        r.fire(sql);
        return r;
      }
    }
    return undefined;
  }

  private handle(client: net.Socket): void {
    const server = net.connect(this.target.port, this.target.host);
    this.accepted++;
    this.clients.add(client);
    for (const s of [client, server]) {
      this.sockets.add(s);
      // Forwarded messages must not wait for Nagle's algorithm (it adds ~40 ms per exchange).
      s.setNoDelay(true);
      s.on('error', kill);
      s.on('close', () => {
        this.sockets.delete(s);
        this.clients.delete(s);
        kill();
      });
    }
    function kill(): void {
      client.destroy();
      server.destroy();
    }

    let startup = true;
    // With the IAM front: the startup message held until the client's password is judged.
    let heldStartup: Buffer | undefined;
    // The IAM front let the login through: the proxy answers the server's authentication itself.
    let login: ServerLogin | undefined;
    // Exchanges: the startup, then every Sync or simple Query, each answered by one
    // ReadyForQuery ('Z'). `sent` counts those forwarded, `answered` the 'Z's received.
    let sent = 0;
    let answered = 0;
    // The fault acting on this connection and the exchange it acts on.
    let fault: { rule: Rule; exchange: number } | undefined;
    let silent = false;
    const statements = new Map<string, string>();
    let fromClient = Buffer.alloc(0);
    let fromServer = Buffer.alloc(0);

    client.on('data', (chunk) => {
      if (silent || this.allSilent) return;
      fromClient = Buffer.concat([fromClient, chunk]);
      const out: Buffer[] = [];
      for (;;) {
        if (startup) {
          // Untyped: length, then a request code.
          if (fromClient.length < 8 || fromClient.length < fromClient.readInt32BE(0)) break;
          const msg = fromClient.subarray(0, fromClient.readInt32BE(0));
          fromClient = fromClient.subarray(msg.length);
          const code = msg.readInt32BE(4);
          if (code === SSL_REQUEST || code === GSSENC_REQUEST) {
            client.write('N');
            continue;
          }
          if (code !== CANCEL_REQUEST) {
            startup = false;
            if (this.iam) {
              heldStartup = msg;
              // AuthenticationCleartextPassword
              client.write(Buffer.from([0x52, 0, 0, 0, 8, 0, 0, 0, 3]));
              continue;
            }
            sent = 1;
          }
          out.push(msg);
          continue;
        }
        const msg = typed(fromClient);
        if (!msg) break;
        if (heldStartup) {
          fromClient = fromClient.subarray(msg.length);
          const iam = this.iam!;
          if (msg[0] === 0x70 /* p */) iam.passwords.push(cstring(msg, 5).text);
          if (msg[0] !== 0x70 || iam.left > 0) {
            if (msg[0] === 0x70) {
              iam.left--;
              iam.refused++;
            }
            client.end(errorResponse('FATAL', '28000', 'PAM authentication failed for user: too many competing requests'));
            server.destroy();
            return;
          }
          iam.accepted++;
          login = new ServerLogin(this.target.user, this.target.password);
          out.push(heldStartup);
          heldStartup = undefined;
          sent = 1;
          continue;
        }
        if (this.chaosCuts()) {
          if (out.length) server.write(Buffer.concat(out));
          kill();
          return;
        }
        fromClient = fromClient.subarray(msg.length);
        const type = String.fromCharCode(msg[0]);
        let sql: string | undefined;
        if (type === 'Q') sql = cstring(msg, 5).text;
        else if (type === 'P') {
          const name = cstring(msg, 5);
          statements.set(name.text, cstring(msg, name.end + 1).text);
        } else if (type === 'B') {
          const portal = cstring(msg, 5);
          sql = statements.get(cstring(msg, portal.end + 1).text);
        }
        if (sql !== undefined && !fault) {
          const rule = this.take(sql);
          if (rule) fault = { rule, exchange: sent + 1 };
        }
        out.push(msg);
        if (type === 'S' || type === 'Q') sent++;
        if (fault?.rule.kind === 'stall' && sent >= fault.exchange) {
          silent = true;
          break;
        }
      }
      if (out.length) server.write(Buffer.concat(out));
    });

    server.on('data', (chunk) => {
      if (this.allSilent) return;
      if (fault && answered + 1 >= fault.exchange && fault.rule.kind === 'stall') return;
      fromServer = Buffer.concat([fromServer, chunk]);
      const out: Buffer[] = [];
      for (;;) {
        const msg = typed(fromServer);
        if (!msg) break;
        if (!fault && this.chaosCuts()) {
          if (out.length) client.write(Buffer.concat(out));
          kill();
          return;
        }
        fromServer = fromServer.subarray(msg.length);
        if (login) {
          // The server's authentication requests, answered here; its AuthenticationOk (or an
          // error) goes on to the client, which sees a login that took its token.
          if (msg[0] === 0x52 /* R */ && msg.readInt32BE(5) !== 0) {
            try {
              server.write(login.answer(msg));
            } catch (e) {
              client.end(errorResponse('FATAL', '28000', (e as Error).message));
              server.destroy();
              return;
            }
            continue;
          }
          login = undefined;
        }
        // This message answers exchange `answered + 1`.
        if (fault && answered + 1 >= fault.exchange) {
          if (fault.rule.kind === 'stall') break;
          // drop: swallow the answer; once the server is ready again, the statement is over.
          if (msg[0] === 0x5a /* Z */) {
            if (out.length) client.write(Buffer.concat(out));
            kill();
            return;
          }
          continue;
        }
        out.push(msg);
        if (msg[0] === 0x5a) answered++;
      }
      if (out.length) client.write(Buffer.concat(out));
    });
  }
}

/**
 * The client side of the server's authentication, for {@link PgProxy.iamLogins}: answers each
 * AuthenticationRequest other than Ok with the password message it asks for.
 */
class ServerLogin {
  private clientFirstBare = '';
  private saltedPassword = Buffer.alloc(0);

  constructor(
    private readonly user: string,
    private readonly password: string,
  ) {}

  /** The answer to the AuthenticationRequest `msg`. @throws on a method this proxy does not know. */
  answer(msg: Buffer): Buffer {
    const code = msg.readInt32BE(5);
    if (code === 3) return passwordMessage(Buffer.from(`${this.password}\0`, 'utf8'));
    if (code === 5) {
      const md5 = (b: Buffer | string) => createHash('md5').update(b).digest('hex');
      const inner = md5(this.password + this.user);
      return passwordMessage(Buffer.from(`md5${md5(Buffer.concat([Buffer.from(inner), msg.subarray(9, 13)]))}\0`));
    }
    if (code === 10) {
      // SASL: SCRAM-SHA-256 without channel binding (the proxy declines SSL).
      this.clientFirstBare = `n=,r=${randomBytes(18).toString('base64')}`;
      const first = Buffer.from(`n,,${this.clientFirstBare}`);
      const len = Buffer.alloc(4);
      len.writeInt32BE(first.length);
      return passwordMessage(Buffer.concat([Buffer.from('SCRAM-SHA-256\0'), len, first]));
    }
    if (code === 11) {
      const serverFirst = msg.subarray(9).toString('utf8');
      const field = (k: string) =>
        serverFirst
          .split(',')
          .find((f) => f.startsWith(`${k}=`))!
          .slice(2);
      this.saltedPassword = pbkdf2Sync(this.password, Buffer.from(field('s'), 'base64'), Number(field('i')), 32, 'sha256');
      const hmac = (key: Buffer, text: string) => createHmac('sha256', key).update(text).digest();
      const clientKey = hmac(this.saltedPassword, 'Client Key');
      const storedKey = createHash('sha256').update(clientKey).digest();
      const withoutProof = `c=biws,r=${field('r')}`;
      const signature = hmac(storedKey, `${this.clientFirstBare},${serverFirst},${withoutProof}`);
      const proof = Buffer.from(clientKey.map((b, i) => b ^ signature[i]));
      return passwordMessage(Buffer.from(`${withoutProof},p=${proof.toString('base64')}`));
    }
    if (code === 12) return Buffer.alloc(0); // SASLFinal: the server's signature; Ok follows.
    throw new Error(`the IAM front of the test proxy cannot answer authentication request ${code}`);
  }
}

/** A PasswordMessage (`p`) carrying `body`. */
function passwordMessage(body: Buffer): Buffer {
  const head = Buffer.alloc(5);
  head[0] = 0x70; // p
  head.writeInt32BE(body.length + 4, 1);
  return Buffer.concat([head, body]);
}

/** An ErrorResponse message with severity, SQLSTATE and message. */
function errorResponse(severity: string, code: string, message: string): Buffer {
  const fields = Buffer.concat(
    [
      ['S', severity],
      ['V', severity],
      ['C', code],
      ['M', message],
    ]
      .map(([k, v]) => Buffer.from(`${k}${v}\0`, 'utf8'))
      .concat([Buffer.from([0])]),
  );
  const head = Buffer.alloc(5);
  head[0] = 0x45; // E
  head.writeInt32BE(fields.length + 4, 1);
  return Buffer.concat([head, fields]);
}

/** The first complete typed message (type byte, length, body) in `buf`, or undefined. */
function typed(buf: Buffer): Buffer | undefined {
  if (buf.length < 5) return undefined;
  const len = buf.readInt32BE(1) + 1;
  return buf.length < len ? undefined : buf.subarray(0, len);
}

/** The NUL-terminated UTF-8 string starting at `start` in `buf`, and the index of its NUL. */
function cstring(buf: Buffer, start: number): { text: string; end: number } {
  const end = buf.indexOf(0, start);
  return { text: buf.subarray(start, end).toString('utf8'), end };
}
