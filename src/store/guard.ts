/**
 * A lifecycle rule as SQL: the guard a transition's UPDATE carries, so that the check of the
 * starting state and the write are one statement.
 */
import type { Rule } from '../model/lifecycle.js';

/** `column` holds one of the states `rule` starts from. States are the code's constants, quoted here. */
export function startsFrom(column: string, rule: Rule<string>): string {
  const states = rule.from.map((state) => `'${state.replaceAll("'", "''")}'`);
  return `${column} IN (${states.join(', ')})`;
}

/**
 * Journaling the step already journaled changes nothing and commits nothing: the guard skips the
 * row, and the repository, finding its state allowed, hands it back as it is.
 */
export const NEW_STEP = 'step IS NOT @step';
