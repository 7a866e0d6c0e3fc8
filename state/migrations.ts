/**
 * The schema history of berthd's SQLite database, oldest first. `migrate()` applies the ones a
 * database has not seen yet and records the last applied version in `PRAGMA user_version`.
 *
 * Rules for adding one: append, never edit or reorder a released migration (databases in the
 * field already ran it); versions are 1, 2, 3, … without gaps.
 */
export interface Migration {
  readonly version: number;
  /** Short label for logs and errors. */
  readonly name: string;
  /** One or more statements, run with `exec` inside the migration's transaction. */
  readonly sql: string;
}

/**
 * Pod sandboxes. STRICT so a mistyped bind (a string pid, a boolean as text) fails loudly
 * instead of being stored under SQLite's type affinity.
 *
 * created_at is TEXT: int64 nanoseconds exceed 2^53, and JS numbers would round them. The CHECK
 * pins it to a canonical decimal (no sign, no leading zero, at most 19 digits = int64), which
 * also makes ORDER BY length(created_at), created_at a numeric order.
 *
 * The unique metadata index is what lets RunPodSandbox be idempotent: kubelet retries with the
 * same (namespace, name, uid, attempt) and gets the existing sandbox's id back.
 */
const createSandboxes = `
CREATE TABLE sandboxes (
  id              TEXT    NOT NULL PRIMARY KEY CHECK (id <> ''),
  name            TEXT    NOT NULL,
  namespace       TEXT    NOT NULL,
  uid             TEXT    NOT NULL,
  attempt         INTEGER NOT NULL CHECK (attempt >= 0),
  state           TEXT    NOT NULL CHECK (state IN ('CREATING', 'READY', 'NOTREADY')),
  step            TEXT    NOT NULL,
  config_json     TEXT    NOT NULL CHECK (json_valid(config_json)),
  runtime_handler TEXT    NOT NULL,
  host_network    INTEGER NOT NULL CHECK (host_network IN (0, 1)),
  netns_path      TEXT,
  network_state   TEXT    NOT NULL CHECK (network_state IN ('NONE', 'ADDING', 'READY', 'TORN_DOWN')),
  cni_config_json TEXT             CHECK (cni_config_json IS NULL OR json_valid(cni_config_json)),
  cni_result_json TEXT             CHECK (cni_result_json IS NULL OR json_valid(cni_result_json)),
  ip              TEXT    NOT NULL,
  additional_ips  TEXT    NOT NULL DEFAULT '[]'
                          CHECK (json_valid(additional_ips) AND json_type(additional_ips) = 'array'),
  created_at      TEXT    NOT NULL CHECK (
                            length(created_at) BETWEEN 1 AND 19
                            AND created_at NOT GLOB '*[^0-9]*'
                            AND (created_at = '0' OR created_at NOT GLOB '0*')
                          ),
  pid             INTEGER NOT NULL CHECK (pid >= 0),
  cgroup_parent   TEXT    NOT NULL,
  sandbox_dir     TEXT    NOT NULL
) STRICT;

CREATE UNIQUE INDEX sandboxes_metadata ON sandboxes (namespace, name, uid, attempt);
`;

export const migrations: readonly Migration[] = [
  { version: 1, name: 'create sandboxes', sql: createSandboxes },
];
