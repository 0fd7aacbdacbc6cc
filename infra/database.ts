// The database (SST v4 `sst.aws.Postgres`, an RDS PostgreSQL instance) or an existing one.
//
// The runner's functions connect as one IAM-authenticated user (`LEASEHOLD_DB_IAM_AUTH=true`,
// the password is a fresh `@aws-sdk/rds-signer` token), so no database password reaches them;
// their roles may `rds-db:connect` as that user only. TLS is required by the server
// (`rds.force_ssl=1`; SST's parameter group sets 0) and verified by the client.
import type { StageSettings } from './config.js';
import type { AwsIdentity } from './identity.js';
import type { Network } from './network.js';

/** How the functions reach the database. Values may be deploy-time outputs. */
export interface DatabaseConnection {
  host: $util.Input<string>;
  port: $util.Input<string>;
  name: $util.Input<string>;
  /** The runner's IAM-authenticated user. */
  user: string;
  /** `arn:…:rds-db:{region}:{account}:dbuser:{dbi-resource-id}/{user}`: what `rds-db:connect` is granted on. */
  userArn: $util.Output<string>;
  /**
   * The master user, for the migration to create the runner's user; only for a database this
   * stage created (an existing database's runner user must exist already).
   */
  admin?: { user: $util.Input<string>; password: $util.Input<string> };
  /** The Postgres component, when this stage created one. */
  postgres?: sst.aws.Postgres;
}

/** Create the stage's database, or describe the existing one the settings name. */
export function database(settings: StageSettings, net: Network, ids: AwsIdentity): DatabaseConnection {
  const db = settings.database;
  if (db.kind === 'existing') {
    return {
      host: db.host,
      port: String(db.port),
      name: db.name,
      user: db.user,
      userArn: dbUserArn(ids, db.resourceId, db.user),
    };
  }

  if (!net.vpc) throw new Error('an RDS database needs the stage VPC');
  const postgres = new sst.aws.Postgres('Database', {
    vpc: net.vpc,
    version: db.version,
    instance: db.instance,
    storage: db.storage,
    multiAz: db.multiAz,
    database: db.name,
    transform: {
      instance: {
        iamDatabaseAuthenticationEnabled: true,
        // Production keeps a final snapshot and cannot be deleted by accident (its instance is
        // also retained on `sst remove`, see removal in sst.config.ts).
        deletionProtection: settings.production,
        skipFinalSnapshot: !settings.production,
        ...(settings.production ? { finalSnapshotIdentifier: `leasehold-${settings.stage}-final` } : {}),
      },
      parameterGroup: {
        parameters: [{ name: 'rds.force_ssl', value: '1' }],
      },
    },
  });
  return {
    host: postgres.host,
    port: $interpolate`${postgres.port}`,
    name: postgres.database,
    user: db.user,
    userArn: dbUserArn(ids, postgres.nodes.instance.resourceId, db.user),
    admin: { user: postgres.username, password: postgres.password },
    postgres,
  };
}

/** The ARN `rds-db:connect` is granted on for `user` of the instance `resourceId`. */
export function dbUserArn(ids: AwsIdentity, resourceId: $util.Input<string>, user: string): $util.Output<string> {
  return $interpolate`arn:${ids.partition}:rds-db:${ids.region}:${ids.accountId}:dbuser:${resourceId}/${user}`;
}
