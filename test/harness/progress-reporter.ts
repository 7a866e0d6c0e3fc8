/**
 * A node test reporter for a run that may be killed before it ends (scripts/vm/guest/files.sh):
 * one line per test as it begins and as it ends, written as they happen, so that what was running
 * when the run's bound killed it can be read afterwards. The spec and TAP reporters say nothing
 * of a test until it ends. It also gives the runner's summary (its closing diagnostics: "pass 3"),
 * so that one reporter beside spec serves: a third makes node warn of a listener leak. Lines,
 * tab-separated:
 *   start <nesting> <name>
 *   pass|fail <nesting> test|suite <name>
 *   note <nesting> <diagnostic>
 */
import type { TestEvent } from 'node:test/reporters';

/** Tabs and newlines in a name would break the line format. */
const flat = (name: string): string => name.replace(/[\t\n\r]+/g, ' ');

export default async function* progressReporter(
  source: AsyncIterable<TestEvent>,
): AsyncGenerator<string, void> {
  for await (const event of source) {
    // A test is dequeued when it begins to run; test:start comes only when it is reported.
    if (event.type === 'test:dequeue') {
      yield `start\t${event.data.nesting}\t${flat(event.data.name)}\n`;
    } else if (event.type === 'test:pass' || event.type === 'test:fail') {
      const outcome = event.type === 'test:pass' ? 'pass' : 'fail';
      const kind = event.data.details.type === 'suite' ? 'suite' : 'test';
      yield `${outcome}\t${event.data.nesting}\t${kind}\t${flat(event.data.name)}\n`;
    } else if (event.type === 'test:diagnostic') {
      yield `note\t${event.data.nesting}\t${flat(event.data.message)}\n`;
    }
  }
}
