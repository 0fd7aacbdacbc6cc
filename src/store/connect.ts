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
}

/**
 * Open a postgres.js pool for `url` (a `postgres://` connection string).
 *
 * Notices are silenced (migrations use `if not exists`), bigint counts come back as numbers
 * and timestamps as `Date`. Throws nothing itself; connection errors surface on the first query.
 */
export function connect(url: string, options: ConnectOptions = {}): Sql {
  const connection: Record<string, string> = {
    application_name: options.applicationName ?? 'leasehold',
  };
  if (options.schema) connection.search_path = options.schema;
  return postgres(url, {
    max: options.max ?? 10,
    idle_timeout: options.idleTimeoutS ?? 30,
    onnotice: () => {},
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
