/** Many calls at once, but not all of them: a test's or a benchmark's load, as berthd bounds its own. */
export { inPool } from '../../src/kit/pool.js';
