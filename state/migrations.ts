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

/**
 * Pulled images. An image's identity is its config digest (what CRI calls the image id); one
 * image has any number of names, each a repo tag or a repo digest, and a name belongs to exactly
 * one image, so re-pulling a tag moves the name rather than duplicating it.
 *
 * layers_json is the ordered layer list (base first) as the manifest gives it. It stays JSON
 * rather than a join table: it is only ever read whole, and the two places that need reverse
 * look-ups (is a layer or blob still used?) run at delete time over at most a few hundred rows.
 *
 * `layers` has one row per uncompressed layer (diff_id), shared by every image that contains it,
 * so a layer is unpacked once. blob_digest is the compressed blob it was unpacked from.
 *
 * Digests are pinned to sha256 with lowercase hex: they become file names under blobs/ and
 * layers/, so the schema refuses anything that could escape those directories. Timestamps follow
 * the rule of migration 1 (canonical decimal int64 nanoseconds).
 */
const createImages = `
CREATE TABLE images (
  id                  TEXT    NOT NULL PRIMARY KEY CHECK (
                                length(id) = 71 AND id GLOB 'sha256:*'
                                AND substr(id, 8) NOT GLOB '*[^0-9a-f]*'
                              ),
  manifest_digest     TEXT    NOT NULL CHECK (
                                length(manifest_digest) = 71 AND manifest_digest GLOB 'sha256:*'
                                AND substr(manifest_digest, 8) NOT GLOB '*[^0-9a-f]*'
                              ),
  manifest_media_type TEXT    NOT NULL,
  config_json         TEXT    NOT NULL CHECK (json_valid(config_json)),
  size                INTEGER NOT NULL CHECK (size >= 0),
  layers_json         TEXT    NOT NULL CHECK (json_valid(layers_json) AND json_type(layers_json) = 'array'),
  created_at          TEXT    NOT NULL CHECK (
                                length(created_at) BETWEEN 1 AND 19
                                AND created_at NOT GLOB '*[^0-9]*'
                                AND (created_at = '0' OR created_at NOT GLOB '0*')
                              ),
  last_used_at        TEXT    NOT NULL CHECK (
                                length(last_used_at) BETWEEN 1 AND 19
                                AND last_used_at NOT GLOB '*[^0-9]*'
                                AND (last_used_at = '0' OR last_used_at NOT GLOB '0*')
                              ),
  pinned              INTEGER NOT NULL CHECK (pinned IN (0, 1))
) STRICT;

CREATE TABLE image_names (
  name     TEXT NOT NULL PRIMARY KEY CHECK (name <> ''),
  image_id TEXT NOT NULL REFERENCES images (id) ON DELETE CASCADE,
  -- A repo digest is the only kind of name with an '@' (repo@sha256:...).
  kind     TEXT NOT NULL CHECK (
             kind IN ('tag', 'digest') AND (kind = 'digest') = (instr(name, '@') > 0)
           )
) STRICT;

-- For the cascade and for "which names does this image have".
CREATE INDEX image_names_image_id ON image_names (image_id);

CREATE TABLE layers (
  diff_id     TEXT    NOT NULL PRIMARY KEY CHECK (
                        length(diff_id) = 71 AND diff_id GLOB 'sha256:*'
                        AND substr(diff_id, 8) NOT GLOB '*[^0-9a-f]*'
                      ),
  blob_digest TEXT    NOT NULL CHECK (
                        length(blob_digest) = 71 AND blob_digest GLOB 'sha256:*'
                        AND substr(blob_digest, 8) NOT GLOB '*[^0-9a-f]*'
                      ),
  size        INTEGER NOT NULL CHECK (size >= 0),
  unpacked    INTEGER NOT NULL CHECK (unpacked IN (0, 1)),
  created_at  TEXT    NOT NULL CHECK (
                        length(created_at) BETWEEN 1 AND 19
                        AND created_at NOT GLOB '*[^0-9]*'
                        AND (created_at = '0' OR created_at NOT GLOB '0*')
                      )
) STRICT;
`;

/**
 * Containers, each in one pod sandbox. Timestamps follow migration 1; '0' means "not yet" (a
 * container that never started has started_at '0').
 *
 * The sandbox reference has no ON DELETE action: RemovePodSandbox removes the sandbox's
 * containers (processes, bundles, rows) first, and a sandbox delete that finds rows left is a bug
 * the foreign key turns into an error instead of silently orphaning or dropping them.
 *
 * image_id is deliberately not a foreign key: whether an in-use image may go is RemoveImage's
 * policy (it asks by image_id, hence the index), not something to surface as a constraint error.
 *
 * (sandbox_id, name, attempt) is unique because CRI names a container by its metadata within a
 * pod: kubelet bumps the attempt for each restart, so a repeat is a caller error.
 */
const createContainers = `
CREATE TABLE containers (
  id           TEXT    NOT NULL PRIMARY KEY CHECK (id <> ''),
  sandbox_id   TEXT    NOT NULL REFERENCES sandboxes (id),
  name         TEXT    NOT NULL,
  attempt      INTEGER NOT NULL CHECK (attempt >= 0),
  state        TEXT    NOT NULL CHECK (state IN ('CREATING', 'CREATED', 'RUNNING', 'EXITED')),
  step         TEXT    NOT NULL,
  config_json  TEXT    NOT NULL CHECK (json_valid(config_json)),
  image_name   TEXT    NOT NULL,
  image_id     TEXT    NOT NULL CHECK (
                         length(image_id) = 71 AND image_id GLOB 'sha256:*'
                         AND substr(image_id, 8) NOT GLOB '*[^0-9a-f]*'
                       ),
  created_at   TEXT    NOT NULL CHECK (
                         length(created_at) BETWEEN 1 AND 19
                         AND created_at NOT GLOB '*[^0-9]*'
                         AND (created_at = '0' OR created_at NOT GLOB '0*')
                       ),
  started_at   TEXT    NOT NULL CHECK (
                         length(started_at) BETWEEN 1 AND 19
                         AND started_at NOT GLOB '*[^0-9]*'
                         AND (started_at = '0' OR started_at NOT GLOB '0*')
                       ),
  finished_at  TEXT    NOT NULL CHECK (
                         length(finished_at) BETWEEN 1 AND 19
                         AND finished_at NOT GLOB '*[^0-9]*'
                         AND (finished_at = '0' OR finished_at NOT GLOB '0*')
                       ),
  -- CRI's exit_code is an int32.
  exit_code    INTEGER NOT NULL CHECK (exit_code BETWEEN -2147483648 AND 2147483647),
  reason       TEXT    NOT NULL,
  message      TEXT    NOT NULL,
  pid          INTEGER NOT NULL CHECK (pid >= 0),
  monitor_pid  INTEGER NOT NULL CHECK (monitor_pid >= 0),
  log_path     TEXT    NOT NULL,
  bundle_dir   TEXT    NOT NULL,
  cgroups_path TEXT    NOT NULL,
  user_json    TEXT    NOT NULL CHECK (json_valid(user_json))
) STRICT;

CREATE UNIQUE INDEX containers_metadata ON containers (sandbox_id, name, attempt);
-- Its leading column also serves "containers of this sandbox" and the foreign key check when a
-- sandbox is deleted, so no separate sandbox_id index.
CREATE INDEX containers_image_id ON containers (image_id);
`;

/**
 * Whether a pod runs an infra process. Pods from before this column all ran one; a pod without
 * one holds its ipc and uts namespaces as pinned files in its sandbox dir instead.
 */
const addSandboxInfra = `
ALTER TABLE sandboxes ADD COLUMN infra INTEGER NOT NULL DEFAULT 1 CHECK (infra IN (0, 1));
`;

/**
 * Specs written once, with the version of their shape. config_json holds what RunPodSandbox or
 * CreateContainer received, as berth stored it, and is never rewritten: a later berth reads an
 * older shape through its decoder (src/store/spec-codec.ts), which fills what that shape lacked.
 * Rows from before the column hold shape 1. The limits UpdateContainerResources sets go to
 * resources_json, with the version of their own shape, NULL until it first runs; rows from before
 * kept them inside config_json, which is where NULL says to look.
 */
const addSpecVersions = `
ALTER TABLE sandboxes ADD COLUMN spec_version INTEGER NOT NULL DEFAULT 1 CHECK (spec_version >= 1);
ALTER TABLE containers ADD COLUMN spec_version INTEGER NOT NULL DEFAULT 1 CHECK (spec_version >= 1);
ALTER TABLE containers ADD COLUMN resources_json TEXT
  CHECK (resources_json IS NULL OR (json_valid(resources_json) AND json_type(resources_json) = 'object'));
ALTER TABLE containers ADD COLUMN resources_version INTEGER
  CHECK ((resources_version IS NULL) = (resources_json IS NULL) AND (resources_version IS NULL OR resources_version >= 1));
`;

/**
 * Pod-level cgroups. pod_cgroup is the cgroup parent berth made for a pod without a cgroup_parent
 * ('' for rows from before, whose containers keep the cgroups they were given); resources_json
 * is what the pod asked for its cgroup (RunPodSandbox, then UpdatePodSandboxResources), NULL when
 * it never asked.
 */
const addPodCgroups = `
ALTER TABLE sandboxes ADD COLUMN pod_cgroup TEXT NOT NULL DEFAULT '';
ALTER TABLE sandboxes ADD COLUMN resources_json TEXT
  CHECK (resources_json IS NULL OR (json_valid(resources_json) AND json_type(resources_json) = 'object'));
`;

/**
 * Whether the container was created from a checkpoint: its StartContainer restores the process
 * (criu, through the runtime) instead of starting the image's command. Rows from before were not.
 */
const addContainerRestore = `
ALTER TABLE containers ADD COLUMN restore INTEGER NOT NULL DEFAULT 0 CHECK (restore IN (0, 1));
`;

/**
 * The infra process's identity and why a pod went NOTREADY on its own. infra_start_time is the
 * infra's start time as /proc/<pid>/stat field 22 gave it when runc created it: with the pid it
 * names that process and no later one given the same pid. 0 where no infra runs, and in rows from
 * before, whose start time start-up reads once from the process runc reports running (runc
 * checks its init's start time itself). reason says what berth found gone (the infra exited, the
 * namespace pins were unmounted) when a pod turned NOTREADY without a StopPodSandbox; '' otherwise.
 */
const addInfraIdentity = `
ALTER TABLE sandboxes ADD COLUMN infra_start_time INTEGER NOT NULL DEFAULT 0 CHECK (infra_start_time >= 0);
ALTER TABLE sandboxes ADD COLUMN reason TEXT NOT NULL DEFAULT '';
`;

export const migrations: readonly Migration[] = [
  { version: 1, name: 'create sandboxes', sql: createSandboxes },
  { version: 2, name: 'create images', sql: createImages },
  { version: 3, name: 'create containers', sql: createContainers },
  { version: 4, name: 'sandbox infra flag', sql: addSandboxInfra },
  { version: 5, name: 'spec versions', sql: addSpecVersions },
  { version: 6, name: 'pod cgroups', sql: addPodCgroups },
  { version: 7, name: 'container restore flag', sql: addContainerRestore },
  { version: 8, name: 'sandbox infra identity', sql: addInfraIdentity },
];
