// The Leasehold component's network and database (docs/deploy.md, "Network", "Database"): a VPC
// with NAT (or an existing network's subnets), RDS PostgreSQL with IAM auth and TLS required (or an
// existing database), and with `database.proxy` an RDS Proxy with end-to-end IAM auth.
import type { Permission } from './args.js';
import type { Build } from './build.js';
import { arnResource, type Input, type Output, type Platform } from './platform.js';
import { kebab } from './settings.js';

type Vpc = InstanceType<Platform['sst']['aws']['Vpc']>;
type Postgres = InstanceType<Platform['sst']['aws']['Postgres']>;
type DatabaseProxy = InstanceType<Platform['aws']['rds']['Proxy']>;

/** The network: the component's VPC (absent with an existing network) and what functions are placed in. */
export function network(b: Build): { vpc?: Vpc; functionVpc: unknown } {
  const { settings, name, t, ids, create } = b;
  const { sst, aws, $interpolate } = b.p;
  const parent = b.parent;
  let vpc: InstanceType<Platform['sst']['aws']['Vpc']> | undefined;
  let functionVpc: unknown;
  if (settings.network.kind === 'existing') {
    functionVpc = { privateSubnets: settings.network.privateSubnets, securityGroups: settings.network.securityGroups };
  } else {
    vpc = create(sst.aws.Vpc, `${name}Vpc`, { az: 2, nat: settings.network.nat }, t.vpc);
    functionVpc = vpc;
    if (settings.network.lambdaEndpoint) {
      new aws.ec2.VpcEndpoint(
        `${name}LambdaEndpoint`,
        {
          vpcId: vpc.id,
          serviceName: $interpolate`com.amazonaws.${ids.region}.lambda`,
          vpcEndpointType: 'Interface',
          privateDnsEnabled: true,
          subnetIds: vpc.privateSubnets,
          securityGroupIds: vpc.securityGroups,
        },
        { parent },
      );
    }
  }
  return { vpc, functionVpc };
}

/** The database the runner's functions reach, and the one user each may connect as there. */
export interface Connection {
  host: Input<string>;
  port: Input<string>;
  name: Input<string>;
  user: string;
  /** The scheduler's own user: the runner's user with an existing database (which may not alter roles). */
  schedulerUser: string;
  userArn: (user: string) => Output<string>;
}

/** Where a function connects (the instance, or the proxy) and its `rds-db:connect` resources. */
export interface Route {
  host: Input<string>;
  port: Input<string>;
  userArn: (user: string) => Output<string>;
  /** Whether it is a transaction-mode pooler (the proxy). */
  pooler: boolean;
}

/**
 * The database: an RDS instance created here (with the component's VPC), or the existing one.
 * @throws {Error} an RDS database without the component's own VPC.
 */
export function database(b: Build, vpc: Vpc | undefined): { postgres?: Postgres; connection: Connection } {
  const { settings, name, t, ids, create, physical } = b;
  const { sst, $interpolate } = b.p;
  // Database: the runner's functions connect as one IAM-authenticated user, so no password
  // reaches them; TLS is required by the server (SST's parameter group sets rds.force_ssl=0).
  const db = settings.database;
  let postgres: InstanceType<Platform['sst']['aws']['Postgres']> | undefined;
  let connection: Connection;
  if (db.kind === 'existing') {
    connection = {
      host: db.host,
      port: String(db.port),
      name: db.name,
      user: db.user,
      schedulerUser: db.user,
      userArn: (user) => $interpolate`arn:${ids.partition}:rds-db:${ids.region}:${ids.accountId}:dbuser:${db.resourceId}/${user}`,
    };
  } else {
    if (!vpc) throw new Error("an RDS database needs the component's own VPC");
    postgres = create(
      sst.aws.Postgres,
      `${name}Database`,
      {
        vpc,
        version: db.version,
        instance: db.instance,
        storage: db.storage,
        multiAz: db.multiAz,
        database: db.name,
        transform: {
          instance: {
            iamDatabaseAuthenticationEnabled: true,
            // Production keeps a final snapshot and cannot be deleted by accident.
            deletionProtection: settings.production,
            skipFinalSnapshot: !settings.production,
            ...(settings.production ? { finalSnapshotIdentifier: physical('final') } : {}),
          },
          parameterGroup: { parameters: [{ name: 'rds.force_ssl', value: '1' }] },
        },
      },
      t.database,
    );
    const resourceId = postgres.nodes.instance.resourceId;
    connection = {
      host: postgres.host,
      port: $interpolate`${postgres.port}`,
      name: postgres.database,
      user: db.user,
      schedulerUser: db.schedulerUser,
      userArn: (user) => $interpolate`arn:${ids.partition}:rds-db:${ids.region}:${ids.accountId}:dbuser:${resourceId}/${user}`,
    };
  }
  return { postgres, connection };
}

/** `rds-db:connect` as `user` on `route`. */
export function connectAs(user: string, route: Route): Permission {
  return { actions: ['rds-db:connect'], resources: [route.userArn(user)] };
}

/**
 * With `database.proxy`, the RDS Proxy in front of the instance, and the route the worker, the API
 * and the trigger take (the proxy's, else the instance's).
 */
export function databaseProxy(
  b: Build,
  vpc: Vpc | undefined,
  postgres: Postgres | undefined,
  connection: Connection,
): { databaseProxy?: DatabaseProxy; runnerRoute: Route } {
  const { settings, name, t, ids, create } = b;
  const { aws, $app, $interpolate } = b.p;
  const db = settings.database;
  // The proxy (database.proxy): the worker, the API and the trigger reach the instance through
  // it, in pooler mode. Clients sign their IAM tokens for the proxy's endpoint; the proxy logs
  // in to the instance as the same user with IAM too (end to end, no secret), through its own
  // role. Its pool keeps to the runner's user's connection limit (settings.budget.proxy).
  let databaseProxy: InstanceType<Platform['aws']['rds']['Proxy']> | undefined;
  let runnerRoute: Route = { host: connection.host, port: connection.port, userArn: connection.userArn, pooler: false };
  if (db.kind === 'rds' && db.proxy && postgres && vpc) {
    const instanceUser = connection.userArn(connection.user);
    const proxyRole = create(
      aws.iam.Role,
      `${name}DatabaseProxyRole`,
      {
        assumeRolePolicy: JSON.stringify({
          Version: '2012-10-17',
          Statement: [{ Effect: 'Allow', Principal: { Service: 'rds.amazonaws.com' }, Action: 'sts:AssumeRole' }],
        }),
        inlinePolicies: [
          {
            name: 'connect',
            policy: $interpolate`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"rds-db:connect","Resource":"${instanceUser}"}]}`,
          },
        ],
      },
      t.databaseProxyRole,
    );
    databaseProxy = create(
      aws.rds.Proxy,
      `${name}DatabaseProxy`,
      {
        name: proxyName($app.name, $app.stage, name),
        engineFamily: 'POSTGRESQL',
        defaultAuthScheme: 'IAM_AUTH',
        requireTls: true,
        roleArn: proxyRole.arn,
        vpcSubnetIds: vpc.privateSubnets,
        vpcSecurityGroupIds: vpc.securityGroups,
      },
      t.databaseProxy,
    );
    const targetGroup = create(
      aws.rds.ProxyDefaultTargetGroup,
      `${name}DatabaseProxyTargetGroup`,
      {
        dbProxyName: databaseProxy.name,
        connectionPoolConfig: {
          maxConnectionsPercent: settings.budget!.proxy!.maxConnectionsPercent,
          // A statement waits at most this long for one of the proxy's connections (its
          // default is 120 s, far past a heartbeat's TTL); then it fails and is retried as
          // any store error.
          connectionBorrowTimeout: 10,
        },
      },
      t.databaseProxyTargetGroup,
    );
    create(aws.rds.ProxyTarget, `${name}DatabaseProxyTarget`, {
      dbProxyName: databaseProxy.name,
      targetGroupName: targetGroup.name,
      dbInstanceIdentifier: postgres.nodes.instance.identifier,
    });
    const proxyResource = arnResource(databaseProxy.arn);
    runnerRoute = {
      host: databaseProxy.endpoint,
      port: '5432',
      userArn: (user) => $interpolate`arn:${ids.partition}:rds-db:${ids.region}:${ids.accountId}:dbuser:${proxyResource}/${user}`,
      pooler: true,
    };
  }
  return { databaseProxy, runnerRoute };
}

/**
 * The RDS Proxy's name: `app-stage-component-proxy`, lowercased, with what RDS refuses in a name
 * (anything but letters, digits and single hyphens inside) turned into hyphens.
 * @throws {Error} longer than RDS's 63 characters.
 */
function proxyName(app: string, stage: string, component: string): string {
  const n = `${app}-${stage}-${kebab(component)}-proxy`
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '');
  if (n.length > 63)
    throw new Error(
      `database.proxy: the proxy's name ${n} is longer than RDS's 63 characters: use a shorter app, stage or component name`,
    );
  return /^[a-z]/.test(n) ? n : `p-${n}`;
}
