// A tiny local TCP server speaking just enough of the PostgreSQL protocol to see how a client
// logs in: it answers SSLRequest (with TLS when given a certificate), reads the startup message,
// asks for a cleartext password (AuthenticationCleartextPassword), records it, and refuses the
// login with 28P01. Nothing else of the protocol is spoken.
import { createServer, type Server, type Socket } from 'node:net';
import { TLSSocket } from 'node:tls';

/** One login attempt the server saw. */
export interface Login {
  /** Startup parameters (`user`, `database`, `application_name`, …). */
  params: Record<string, string>;
  /** The password the client sent, in clear text (undefined when it sent none). */
  password?: string;
  /** Whether the attempt came over TLS. */
  tls: boolean;
}

/** A running fake server. */
export interface FakePostgres {
  /** `localhost`. */
  host: string;
  /** The address `localhost` resolved to and the server listens on (`127.0.0.1` or `::1`). */
  address: string;
  port: number;
  logins: Login[];
  close(): Promise<void>;
}

const SSL_REQUEST = 80877103;
const GSSENC_REQUEST = 80877104;
const PROTOCOL_3 = 196608;

/**
 * Start the fake server on `localhost` (a free port). With `tls`, an SSLRequest is answered `S`
 * and the connection continues over TLS with that key and certificate; without, `N`.
 */
export async function fakePostgres(options: { tls?: { key: string; cert: string } } = {}): Promise<FakePostgres> {
  const logins: Login[] = [];
  const sockets = new Set<Socket>();
  const server: Server = createServer((raw) => {
    sockets.add(raw);
    raw.on('close', () => sockets.delete(raw));
    raw.on('error', () => {});
    serve(raw, false);
  });

  function serve(socket: Socket, overTls: boolean): void {
    let buffer = Buffer.alloc(0);
    let login: Login | undefined;
    const onData = (chunk: Buffer) => {
      buffer = Buffer.concat([buffer, chunk]);
      while (true) {
        if (!login) {
          // Untyped messages first: SSLRequest / GSSENCRequest / StartupMessage.
          if (buffer.length < 8) return;
          const len = buffer.readInt32BE(0);
          if (buffer.length < len) return;
          const code = buffer.readInt32BE(4);
          const body = buffer.subarray(8, len);
          buffer = buffer.subarray(len);
          if (code === SSL_REQUEST) {
            if (options.tls && !overTls) {
              socket.off('data', onData);
              socket.write('S');
              const secure = new TLSSocket(socket, { isServer: true, key: options.tls.key, cert: options.tls.cert });
              secure.on('error', () => {});
              serve(secure, true);
            } else {
              socket.write('N');
            }
            if (options.tls && !overTls) return;
            continue;
          }
          if (code === GSSENC_REQUEST) {
            socket.write('N');
            continue;
          }
          if (code !== PROTOCOL_3) return void socket.destroy();
          const parts = body.toString('utf8').split('\u0000');
          const params: Record<string, string> = {};
          for (let i = 0; i + 1 < parts.length && parts[i] !== ''; i += 2) params[parts[i]] = parts[i + 1];
          login = { params, tls: overTls };
          logins.push(login);
          // AuthenticationCleartextPassword.
          const ask = Buffer.alloc(9);
          ask.write('R', 0);
          ask.writeInt32BE(8, 1);
          ask.writeInt32BE(3, 5);
          socket.write(ask);
          continue;
        }
        // Typed messages: we expect one PasswordMessage ('p').
        if (buffer.length < 5) return;
        const type = String.fromCharCode(buffer[0]);
        const len = buffer.readInt32BE(1);
        if (buffer.length < 1 + len) return;
        const body = buffer.subarray(5, 1 + len);
        buffer = buffer.subarray(1 + len);
        if (type === 'p') {
          // eslint-disable-next-line no-control-regex -- the message ends in a NUL
          login.password = body.toString('utf8').replace(/\u0000$/, '');
          socket.end(errorResponse('28P01', 'password authentication failed (fake server: password recorded)'));
          return;
        }
        if (type === 'X') return void socket.end();
      }
    };
    socket.on('data', onData);
  }

  await new Promise<void>((resolve) => server.listen(0, 'localhost', resolve));
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  return {
    host: 'localhost',
    address: typeof address === 'object' && address ? address.address : '127.0.0.1',
    port,
    logins,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/** An ErrorResponse ('E') with severity FATAL, SQLSTATE `code` and `message`. */
function errorResponse(code: string, message: string): Buffer {
  const fields = Buffer.from(`SFATAL\u0000VFATAL\u0000C${code}\u0000M${message}\u0000\u0000`, 'utf8');
  const head = Buffer.alloc(5);
  head.write('E', 0);
  head.writeInt32BE(4 + fields.length, 1);
  return Buffer.concat([head, fields]);
}
