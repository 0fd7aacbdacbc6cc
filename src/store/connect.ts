import postgres from 'postgres';

/** A postgres.js client as used throughout leasehold. */
export type Sql = postgres.Sql<Record<string, never>>;

/** Options for {@link connect}. */
export interface ConnectOptions {
  /** Maximum pool size. Default 10. */
  max?: number;
  /** Close idle connections after this many seconds (postgres.js unit). Default 30 s. */
  idleTimeoutS?: number;
  /** Schema to put first on the `search_path` (tests isolate themselves this way). Default: none. */
  schema?: string;
  /** Application name shown in `pg_stat_activity`. Default `leasehold`. */
  applicationName?: string;
  /**
   * Server-side `statement_timeout`, ms: a statement stuck on a lock or a slow plan fails
   * instead of holding a run or a worker. Default 30,000; 0 disables it.
   */
  statementTimeoutMs?: number;
}

/**
 * Open a postgres.js pool for `url` (a `postgres://` connection string).
 *
 * Notices are silenced (migrations use `if not exists`), bigint counts come back as numbers,
 * timestamps as `Date`, and statements time out after `statementTimeoutMs`. Throws nothing
 * itself; connection errors surface on the first query.
 */
export function connect(url: string, options: ConnectOptions = {}): Sql {
  const connection: Record<string, string> = {
    application_name: options.applicationName ?? 'leasehold',
  };
  if (options.schema) connection.search_path = options.schema;
  connection.statement_timeout = String(options.statementTimeoutMs ?? 30_000);
  return postgres(url, {
    max: options.max ?? 10,
    idle_timeout: options.idleTimeoutS ?? 30,
    onnotice: () => {},
    // Type discovery runs a catalog query on every new connection whose failure postgres.js
    // leaves unhandled (a connection killed at that moment crashed the process); leasehold
    // uses only built-in types, so it is not needed.
    fetch_types: false,
    connection,
    types: {
      // count(*) and other int8 results: safe as numbers far beyond any item count.
      bigint: {
        to: 20,
        from: [20],
        serialize: (x: number) => x.toString(),
        parse: (x: string) => Number(x),
      },
    },
  }) as unknown as Sql;
}
