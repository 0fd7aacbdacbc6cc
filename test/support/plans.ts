// Reading what a statement's plan really read (docs/design.md, "The database in production"):
// EXPLAIN ANALYZE of a postgres.js fragment inside a transaction that is rolled back, and the
// rows every node of the plan read, so a test can assert that no node reads beyond the
// statement's own limit whatever the planner estimated.
import type { PendingQuery, Row } from 'postgres';
import type { Sql } from '../../src/store/index.js';

/** One node of a JSON plan (`EXPLAIN (ANALYZE, FORMAT JSON)`), the fields {@link readRows} uses. */
export interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  'CTE Name'?: string;
  'Subplan Name'?: string;
  /** The planner's estimate of rows per loop. */
  'Plan Rows'?: number;
  'Actual Rows'?: number;
  'Actual Loops'?: number;
  'Rows Removed by Filter'?: number;
  'Rows Removed by Join Filter'?: number;
  'Rows Removed by Index Recheck'?: number;
  Plans?: PlanNode[];
}

/** What one node read, as {@link readRows} computes it. */
export interface NodeRead {
  /** `Node Type`, then `on <relation>`, `using <index>`, `<CTE or subplan name>` when present. */
  node: string;
  /**
   * Rows the node produced plus the rows it read and threw away, over all its loops:
   * `(Actual Rows + Rows Removed by Filter + Rows Removed by Join Filter + Rows Removed by
   * Index Recheck) × Actual Loops` (EXPLAIN reports each per loop).
   */
  rows: number;
  loops: number;
}

/** The name of a node for messages: type, relation, index, CTE or subplan. */
export function nodeName(n: PlanNode): string {
  return [
    n['Node Type'],
    n['Relation Name'] && `on ${n['Relation Name']}`,
    n['Index Name'] && `using ${n['Index Name']}`,
    n['CTE Name'] && `(CTE ${n['CTE Name']})`,
    n['Subplan Name'] && `(${n['Subplan Name']})`,
  ]
    .filter(Boolean)
    .join(' ');
}

/** Every node of the plan tree (depth first, the root first) with the rows it read. */
export function readRows(plan: PlanNode): NodeRead[] {
  const loops = plan['Actual Loops'] ?? 0;
  const perLoop =
    (plan['Actual Rows'] ?? 0) +
    (plan['Rows Removed by Filter'] ?? 0) +
    (plan['Rows Removed by Join Filter'] ?? 0) +
    (plan['Rows Removed by Index Recheck'] ?? 0);
  const self: NodeRead = { node: nodeName(plan), rows: Math.round(perLoop * loops), loops };
  return [self, ...(plan.Plans ?? []).flatMap(readRows)];
}

/** Thrown inside the transaction of {@link explainAnalyze} to roll it back. */
class Rollback extends Error {}

/**
 * Runs `EXPLAIN (ANALYZE, FORMAT JSON)` of the fragment `make(tx)` builds, in a transaction
 * that is always rolled back (ANALYZE executes writes), after `setup(tx)` when given (its
 * writes are rolled back too). Returns the root plan node.
 *
 * @throws the database error of the setup or the statement.
 */
export async function explainAnalyze(
  sql: Sql,
  make: (tx: Sql) => PendingQuery<Row[]>,
  setup?: (tx: Sql) => Promise<unknown>,
): Promise<PlanNode> {
  let plan: PlanNode | undefined;
  try {
    await sql.begin(async (tx) => {
      const t = tx as unknown as Sql;
      if (setup) await setup(t);
      const [row] = await t`explain (analyze, format json) ${make(t)}`;
      const json = (row as Record<string, unknown>)['QUERY PLAN'];
      plan = (typeof json === 'string' ? JSON.parse(json) : json)[0].Plan as PlanNode;
      throw new Rollback();
    });
  } catch (e) {
    if (!(e instanceof Rollback)) throw e;
  }
  if (!plan) throw new Error('EXPLAIN returned no plan');
  return plan;
}

/** How far beyond its bound a node may read: `bound × factor + slack`. */
export interface Allowance {
  /** Default 4. */
  factor?: number;
  /** Default 50 (a few index probes of the fence, a tenant row, a process row…). */
  slack?: number;
  /** Runs inside the rolled-back transaction before the statement (for example to lock or mark rows). */
  setup?: (tx: Sql) => Promise<unknown>;
}

/**
 * Explains the statement (rolled back) and throws when any node read more than
 * `bound × factor + slack` rows. The message names the statement (`name`, for example
 * `"claim [lived-in]"`), each node over the limit (type, relation, index) with its rows and
 * loops, and the whole tree with the rows each node read. Returns the plan's reads.
 *
 * @throws an Error naming every node over the limit; the database error of the statement.
 */
export async function expectBounded(
  sql: Sql,
  name: string,
  make: (tx: Sql) => PendingQuery<Row[]>,
  bound: number,
  allowance: Allowance = {},
): Promise<NodeRead[]> {
  const limit = bound * (allowance.factor ?? 4) + (allowance.slack ?? 50);
  const plan = await explainAnalyze(sql, make, allowance.setup);
  const reads = readRows(plan);
  const over = reads.filter((r) => r.rows > limit);
  if (over.length > 0) {
    const tree = (n: PlanNode, depth: number): string[] => [
      `${'  '.repeat(depth)}${nodeName(n)}: ${readRows({ ...n, Plans: [] })[0].rows} rows read (estimated ${n['Plan Rows'] ?? '?'} a loop)`,
      ...(n.Plans ?? []).flatMap((c) => tree(c, depth + 1)),
    ];
    throw new Error(
      `${name}: reads beyond its bound of ${bound} (at most ${limit} rows a node):\n` +
        over.map((r) => `  ${r.node}: ${r.rows} rows in ${r.loops} loop(s)`).join('\n') +
        `\nplan:\n${tree(plan, 1).join('\n')}`,
    );
  }
  return reads;
}
