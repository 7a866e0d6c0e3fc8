/**
 * The machinery of a lifecycle table: named transitions, each allowed from some states and leading
 * to one. The tables themselves live beside the records they govern (sandbox-lifecycle.ts,
 * container-lifecycle.ts).
 */
import { FailedPreconditionError } from '../errors.js';

/** One named transition: the states it may start from, and the state it leads to (absent: stays). */
export interface Rule<S extends string> {
  readonly from: readonly S[];
  readonly to?: S;
}

/**
 * A transition asked of a record in a state its rule does not start from. Stored rows only ever
 * reach such a state through a race or a bug, so the record is left as it was and the caller
 * fails; to a CRI client that is FAILED_PRECONDITION.
 */
export class IllegalTransitionError extends FailedPreconditionError {
  override name = 'IllegalTransitionError';
  constructor(
    /** The record, as errors name it: `pod sandbox <id>`, `container <id>`. */
    readonly subject: string,
    readonly transition: string,
    /** Which of the record's states refused it: `state`, `network state`. */
    readonly dimension: string,
    readonly current: string,
    readonly allowed: readonly string[],
  ) {
    super(
      `${subject}: ${transition} is not allowed in ${dimension} ${current} (only in ${allowed.join(', ')})`,
    );
  }
}

/** A transition as asked of one record: what the error names if the record's state refuses it. */
export interface TransitionAsked {
  subject: string;
  transition: string;
  dimension: string;
}

/** The state `rule` leads to from `current`; throws IllegalTransitionError when it may not start there. */
export function follow<S extends string>(rule: Rule<S>, current: S, asked: TransitionAsked): S {
  if (!rule.from.includes(current)) {
    throw new IllegalTransitionError(asked.subject, asked.transition, asked.dimension, current, rule.from);
  }
  return rule.to ?? current;
}
