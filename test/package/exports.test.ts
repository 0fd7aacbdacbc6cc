// The package's public API (docs/design.md, "Layout"): each entry point names its exports, and
// this test pins the sorted lists, values and types apart, so widening (or narrowing) the API is a
// visible decision in review rather than a side effect of a module barrel.
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const ROOT = resolve(import.meta.dirname, '../..');

const ENTRY_POINTS = {
  leasehold: 'src/index.ts',
  'leasehold/lambda': 'src/lambda.ts',
  'leasehold/sst': 'infra/index.ts',
} as const;

/** The names `file` exports, read by the TypeScript checker: values (classes, functions, constants) and types-only names. */
function exportsOf(program: ts.Program, file: string): { values: string[]; types: string[] } {
  const checker = program.getTypeChecker();
  const source = program.getSourceFile(resolve(ROOT, file));
  if (!source) throw new Error(`${file} is not part of the program`);
  const module = checker.getSymbolAtLocation(source);
  if (!module) throw new Error(`${file} is not a module`);
  const values: string[] = [];
  const types: string[] = [];
  for (const symbol of checker.getExportsOfModule(module)) {
    const target = symbol.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(symbol) : symbol;
    (target.flags & ts.SymbolFlags.Value ? values : types).push(symbol.name);
  }
  return { values: values.sort(), types: types.sort() };
}

describe('the public API', () => {
  const program = ts.createProgram(
    Object.values(ENTRY_POINTS).map((f) => resolve(ROOT, f)),
    {
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      target: ts.ScriptTarget.ES2022,
      strict: true,
      noEmit: true,
      skipLibCheck: true,
    },
  );

  it('leasehold exports the job-writing library, by name', () => {
    expect(exportsOf(program, ENTRY_POINTS.leasehold)).toEqual({
      values: [
        'BatchError',
        'BatchTooLargeError',
        'CheckpointTooLargeError',
        'InvalidBatchError',
        'InvalidParamsError',
        'InvalidRequestError',
        'InvalidSettingError',
        'ItemLostError',
        'ItemStaleError',
        'ItemTimeoutError',
        'LambdaCallbackError',
        'LambdaFunctionError',
        'LambdaItemError',
        'LambdaPayloadTooLargeError',
        'LambdaThrottledError',
        'LeaseholdError',
        'MigrationLockError',
        'PermanentItemError',
        'RetryAfterError',
        'SchemaMismatchError',
        'TooManyBatchesError',
        'UnknownJobError',
        'UnstorableStateError',
        'checksum',
        'connect',
        'createBatch',
        'createLog',
        'defineJob',
        'defineUnitJob',
        'lambdaInvoke',
        'migrate',
        'outboxDelivery',
        'parseRetryAfter',
        'silentLog',
      ],
      types: [
        'BatchInfo',
        'BatchStatus',
        'ChecksumOutput',
        'ConfigIssue',
        'ConnectOptions',
        'ConnectTarget',
        'CreateOptions',
        'Fence',
        'ItemCallResult',
        'ItemContext',
        'ItemInput',
        'ItemResult',
        'ItemSource',
        'ItemState',
        'ItemWait',
        'ItemWork',
        'ItemsCall',
        'ItemsWork',
        'Job',
        'JobCall',
        'JobContext',
        'JobItem',
        'LambdaInvokeCallEvent',
        'LambdaInvokeCallResult',
        'LambdaInvokeCallback',
        'LambdaInvokeEvent',
        'LambdaInvokeParams',
        'Log',
        'LogFields',
        'LogLevel',
        'MigrateOptions',
        'Migration',
        'NewBatch',
        'OutboxConfig',
        'OutboxDeliveryOptions',
        'PerBatch',
        'PoolSpec',
        'RateLimit',
        'Sql',
        'StartLimit',
        'ToleratedFailures',
        'UnitContext',
        'UnitJob',
      ],
    });
  });

  it('leasehold/lambda exports the handler factory and the shapes of its handlers', () => {
    expect(exportsOf(program, ENTRY_POINTS['leasehold/lambda'])).toEqual({
      values: ['ConfigError', 'HANDLERS_MARK', 'HANDLERS_MODULE', 'createHandlers'],
      types: [
        'Handlers',
        'HandlersOptions',
        'LambdaHandler',
        'LocalFunction',
        'LocalFunctions',
        'MigrateResult',
        'SchedulerResult',
        'SchemaSkipped',
        'StreamingLambdaHandler',
        'TriggerResult',
        'WorkerEvent',
        'WorkerResult',
      ],
    });
  });

  it('leasehold/sst exports the component, its arguments and the event names rules match', () => {
    expect(exportsOf(program, ENTRY_POINTS['leasehold/sst'])).toEqual({
      values: [
        'BATCH_FINISHED_DETAIL_TYPE',
        'EVENT_SOURCE',
        'Leasehold',
        'PRODUCTION_STAGES',
        'START_BATCH_DETAIL_TYPE',
        'databaseFromEnv',
      ],
      types: [
        'ConnectionBudget',
        'ExistingDatabase',
        'ExistingNetwork',
        'FinalStatus',
        'FunctionLike',
        'FunctionSettings',
        'Input',
        'InvokableFunction',
        'LeaseholdArgs',
        'LeaseholdConstructor',
        'LeaseholdTransforms',
        'NewNetwork',
        'Output',
        'Permission',
        'RdsDatabase',
        'ResourceOptions',
        'RuleDeclaration',
        'ScheduleDeclaration',
        'Settings',
        'SettingsOptions',
        'Transform',
        'WorkerSettings',
      ],
    });
  });

  it('no entry point re-exports a whole module', () => {
    for (const file of Object.values(ENTRY_POINTS)) {
      expect(readFileSync(resolve(ROOT, file), 'utf8'), file).not.toMatch(/^export \*/m);
    }
  });
});
