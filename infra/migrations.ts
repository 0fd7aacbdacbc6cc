// Migrations on every deploy, before new code takes traffic (SST v4 `sst.aws.Function` plus
// `aws.lambda.Invocation`, the way SST itself runs a function at deploy time).
//
// The migrate function runs in the VPC; its invocation is replaced on every deploy (the
// `deployedAt` trigger), so it runs each time, and a migration that throws fails the deploy.
// Every other function's Lambda resource depends on the invocation (see `afterMigrations`), so
// its new code goes live only after the schema is migrated.
import { functionName, RUNTIME, type StageSettings } from './config.js';
import type { DatabaseConnection } from './database.js';
import type { Network } from './network.js';

/** The migration files, relative to sst.config.ts. */
const MIGRATIONS_SOURCE = 'src/store/migrations';
/** Where they land in the migrate function's package. */
const MIGRATIONS_PACKAGED = 'migrations';

/**
 * Create the migrate function and its deploy-time invocation; returns the invocation.
 *
 * Environment (read by src/runtime's configuration): for a database this stage created, the
 * migration connects as the master user with its password (`LEASEHOLD_DB_IAM_AUTH=false`,
 * `LEASEHOLD_DB_PASSWORD`) and creates the runner's user `LEASEHOLD_DB_IAM_USER` with
 * `GRANT rds_iam`; for an existing database it connects as the runner's user through IAM.
 */
export function migrations(settings: StageSettings, net: Network, db: DatabaseConnection) {
  const connection = db.admin
    ? {
        LEASEHOLD_DB_USER: db.admin.user,
        LEASEHOLD_DB_PASSWORD: db.admin.password,
        LEASEHOLD_DB_IAM_AUTH: 'false',
        LEASEHOLD_DB_IAM_USER: db.user,
      }
    : { LEASEHOLD_DB_USER: db.user, LEASEHOLD_DB_IAM_AUTH: 'true' };

  const migrate = new sst.aws.Function('Migrate', {
    name: functionName($app.name, $app.stage, 'migrate'),
    handler: 'functions/migrate.handler',
    runtime: RUNTIME,
    vpc: net.functionVpc,
    timeout: `${settings.timeouts.migrateSeconds} seconds`,
    // Deployed as is in `sst dev` too: the deploy waits on it.
    dev: false,
    // The numbered .sql files are read at run time, not bundled: ship them in the package
    // (its root is /var/task in Lambda) and say where.
    copyFiles: [{ from: MIGRATIONS_SOURCE, to: MIGRATIONS_PACKAGED }],
    environment: {
      LEASEHOLD_DB_HOST: db.host,
      LEASEHOLD_DB_PORT: db.port,
      LEASEHOLD_DB_NAME: db.name,
      LEASEHOLD_MIGRATIONS_DIR: `/var/task/${MIGRATIONS_PACKAGED}`,
      ...connection,
    },
    permissions: db.admin ? [] : [{ actions: ['rds-db:connect'], resources: [db.userArn] }],
  });

  return new aws.lambda.Invocation(
    'Migrations',
    {
      functionName: migrate.name,
      input: JSON.stringify({ stage: $app.stage }),
      triggers: { deployedAt: String(Date.now()) },
    },
    { dependsOn: [migrate] },
  );
}

/**
 * A `transform.function` for SST functions: the Lambda resource waits for `migration`, so new
 * code takes traffic only after the schema is migrated.
 */
export function afterMigrations(migration: aws.lambda.Invocation) {
  return (_args: unknown, opts: { dependsOn?: unknown }) => {
    const before = opts.dependsOn === undefined ? [] : [opts.dependsOn].flat();
    opts.dependsOn = [...before, migration];
  };
}
