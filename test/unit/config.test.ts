import assert from 'node:assert/strict';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { BerthError } from '../../src/errors.js';
import { ConfigError } from '../../src/config/error.js';
import { loadConfig, type LoadOptions } from '../../src/config/load.js';
import { defaultConfig } from '../../src/config/settings.js';
import { formatDuration } from '../../src/config/values.js';
import type { BerthConfig } from '../../src/config/types.js';

const dir = mkdtempSync(join(tmpdir(), 'berth-config-test-'));
after(() => rmSync(dir, { recursive: true, force: true }));

let fileCount = 0;
function tomlFile(text: string): string {
  const path = join(dir, `c${fileCount++}.toml`);
  writeFileSync(path, text, { mode: 0o644 });
  return path;
}

/** No default config file, a host without systemd: the tests never see the machine's /etc. */
const opts: LoadOptions = { defaultConfigPath: join(dir, 'absent.toml'), hostRunsSystemd: () => false };

function run(argv: string[], o: LoadOptions = opts): BerthConfig {
  const result = loadConfig(argv, o);
  assert.equal(result.kind, 'run');
  if (result.kind !== 'run') throw new Error('unreachable');
  return result.config;
}

/** Asserts a ConfigError whose message contains every fragment. */
function fails(argv: string[], fragments: string[], o: LoadOptions = opts): void {
  assert.throws(
    () => loadConfig(argv, o),
    (err: unknown) => {
      assert.ok(err instanceof ConfigError, `expected ConfigError, got ${String(err)}`);
      assert.ok(err instanceof BerthError);
      for (const f of fragments) assert.ok(err.message.includes(f), `"${err.message}" lacks "${f}"`);
      return true;
    },
  );
}

const FULL_FILE = `
socket = "unix:///srv/berth/api.sock"
root = "/srv/berth/lib"
state = "/srv/berth/run"
log_level = "debug"
cgroup_driver = "cgroupfs"
pod_infra = "always"
userns_min_host_id = 1000
shutdown_timeout = "1m"

[cni]
conf_dir = "/srv/cni/conf"
bin_dirs = ["/srv/cni/bin", "/srv/cni/bin2/"]
timeout = "1m30s"

[cdi]
spec_dirs = ["/srv/cdi", "/srv/run/cdi"]

[netns]
dir = "/srv/netns"

[image]
registry_config = "/srv/registries.toml"
registry_timeout = "45s"

[runtime]
path = "/usr/local/sbin/runc"
monitor = "/usr/local/bin/conmon"
monitor_cgroup = "inherit"
timeout = "500ms"

[runtime.handlers.fast]
path = "/usr/local/sbin/crun"
root = "/srv/berth/run/crun"

[pod]
stop_grace_period = "0s"

[streaming]
address = "[::1]:10010"
idle_timeout = "30m"
max_connections = 100
tls_cert = "/srv/tls/streaming.crt"
tls_key = "/srv/tls/streaming.key"

[metrics]
address = "0.0.0.0:9650"
max_connections = 8
`;

describe('loadConfig defaults', () => {
  it('uses the built-in defaults with no flags and no config file', () => {
    assert.deepEqual(run([]), {
      socket: '/run/berth/berth.sock',
      rootDir: '/var/lib/berth',
      stateDir: '/run/berth',
      cniConfDir: '/etc/cni/net.d',
      cniBinDirs: ['/opt/cni/bin', '/usr/lib/cni'],
      cdiSpecDirs: ['/etc/cdi', '/var/run/cdi'],
      netnsDir: '/var/run/netns',
      registryConfig: '/etc/berth/registries.toml',
      registryTimeoutMs: 60_000,
      imagePullProgressTimeoutMs: 300_000,
      runtime: 'runc',
      runtimeHandlers: [],
      monitor: 'conmon',
      monitorCgroup: 'berth-monitors',
      cgroupDriver: 'cgroupfs',
      podInfra: 'auto',
      usernsMinHostId: 65536,
      shutdownTimeoutMs: 30_000,
      logLevel: 'info',
      cniTimeoutMs: 30_000,
      runtimeTimeoutMs: 30_000,
      stopGraceMs: 10_000,
      streamingAddress: '127.0.0.1:0',
      streamingIdleTimeoutMs: 4 * 3_600_000,
      streamingMaxConnections: 512,
      streamingTlsCert: '',
      streamingTlsKey: '',
      metricsAddress: '127.0.0.1:9649',
      metricsMaxConnections: 64,
    });
  });

  it('hands out a fresh defaults object each time', () => {
    const a = defaultConfig();
    a.cniBinDirs.push('/x');
    assert.deepEqual(defaultConfig().cniBinDirs, ['/opt/cni/bin', '/usr/lib/cni']);
  });

  it('reads the default config file when it exists', () => {
    const path = tomlFile('log_level = "warn"\n');
    assert.equal(run([], { ...opts, defaultConfigPath: path }).logLevel, 'warn');
  });

  it('the example config/berth.toml parses and equals the defaults', () => {
    const example = new URL('../../../config/berth.toml', import.meta.url).pathname;
    assert.deepEqual(run(['--config', example]), defaultConfig());
  });
});

describe('loadConfig config file', () => {
  it('overrides every default', () => {
    const path = tomlFile(FULL_FILE);
    assert.deepEqual(run(['--config', path]), {
      socket: '/srv/berth/api.sock',
      rootDir: '/srv/berth/lib',
      stateDir: '/srv/berth/run',
      cniConfDir: '/srv/cni/conf',
      cniBinDirs: ['/srv/cni/bin', '/srv/cni/bin2'],
      cdiSpecDirs: ['/srv/cdi', '/srv/run/cdi'],
      netnsDir: '/srv/netns',
      registryConfig: '/srv/registries.toml',
      registryTimeoutMs: 45_000,
      imagePullProgressTimeoutMs: 300_000,
      runtime: '/usr/local/sbin/runc',
      runtimeHandlers: [{ name: 'fast', path: '/usr/local/sbin/crun', root: '/srv/berth/run/crun' }],
      monitor: '/usr/local/bin/conmon',
      monitorCgroup: 'inherit',
      cgroupDriver: 'cgroupfs',
      podInfra: 'always',
      usernsMinHostId: 1000,
      shutdownTimeoutMs: 60_000,
      logLevel: 'debug',
      cniTimeoutMs: 90_000,
      runtimeTimeoutMs: 500,
      stopGraceMs: 0,
      streamingAddress: '[::1]:10010',
      streamingIdleTimeoutMs: 30 * 60_000,
      streamingMaxConnections: 100,
      streamingTlsCert: '/srv/tls/streaming.crt',
      streamingTlsKey: '/srv/tls/streaming.key',
      metricsAddress: '0.0.0.0:9650',
      metricsMaxConnections: 8,
    });
  });

  it('checks the streaming settings, naming the key or flag', () => {
    fails(['--config', tomlFile('[streaming]\naddress = "localhost"\n')], ['streaming.address', 'HOST:PORT']);
    fails(
      ['--config', tomlFile('[streaming]\naddress = "example.com:80"\n')],
      ['streaming.address', 'IP address'],
    );
    fails(['--streaming-address', '127.0.0.1:70000'], ['--streaming-address', 'HOST:PORT']);
    fails(['--streaming-tls-cert', '/srv/a.crt'], ['--streaming-tls-key', 'both']);
    fails(['--config', tomlFile('[streaming]\nidle_timeout = 5\n')], ['streaming.idle_timeout', 'duration']);
    const config = run(['--streaming-address', ':10010', '--streaming-idle-timeout', '0s']);
    assert.equal(config.streamingAddress, ':10010');
    assert.equal(config.streamingIdleTimeoutMs, 0);
  });

  it('reads connection caps as whole numbers in range, naming the key or flag', () => {
    assert.equal(run(['--streaming-max-connections', '20']).streamingMaxConnections, 20);
    assert.equal(run(['--metrics-max-connections=3']).metricsMaxConnections, 3);
    fails(['--streaming-max-connections', '0'], ['--streaming-max-connections', 'from 1']);
    fails(['--streaming-max-connections', '1e3'], ['--streaming-max-connections', 'whole number']);
    fails(['--metrics-max-connections=-1'], ['--metrics-max-connections', 'whole number']);
    fails(
      ['--config', tomlFile('[streaming]\nmax_connections = "20"\n')],
      ['streaming.max_connections', 'integer'],
    );
    fails(
      ['--config', tomlFile('[metrics]\nmax_connections = 2.5\n')],
      ['metrics.max_connections', 'float 2.5'],
    );
    fails(
      ['--config', tomlFile('[metrics]\nmax_connections = 2000000\n')],
      ['metrics.max_connections', 'to 1000000'],
    );
  });

  it('turns metrics off with an empty address and checks any other', () => {
    assert.equal(run(['--metrics-address', '']).metricsAddress, '');
    assert.equal(run(['--config', tomlFile('[metrics]\naddress = ""\n')]).metricsAddress, '');
    assert.equal(run(['--metrics-address', '[::]:0']).metricsAddress, '[::]:0');
    fails(['--metrics-address', 'localhost'], ['--metrics-address', 'HOST:PORT']);
    fails(
      ['--config', tomlFile('[metrics]\naddress = "example.com:1"\n')],
      ['metrics.address', 'IP address'],
    );
  });

  it('keeps defaults for keys the file leaves out', () => {
    const config = run(['--config', tomlFile('[cni]\nconf_dir = "/srv/cni"\n')]);
    assert.equal(config.cniConfDir, '/srv/cni');
    assert.deepEqual(config.cniBinDirs, defaultConfig().cniBinDirs);
    assert.equal(config.rootDir, '/var/lib/berth');
  });

  it('accepts an empty file', () => {
    assert.deepEqual(run(['--config', tomlFile('')]), defaultConfig());
  });

  it('rejects an unknown top-level key, naming key and file', () => {
    const path = tomlFile('sokcet = "/run/x.sock"\n');
    fails(['--config', path], [path, '"sokcet"', 'unknown key']);
  });

  it('rejects an unknown key inside a table, naming the dotted key', () => {
    const path = tomlFile('[cni]\nconfdir = "/etc/cni"\n');
    fails(['--config', path], [path, '"cni.confdir"']);
  });

  it('rejects an unknown table', () => {
    const path = tomlFile('[plugins]\nx = 1\n');
    fails(['--config', path], [path, '"plugins"']);
  });

  it('rejects wrong types, naming the key', () => {
    fails(['--config', tomlFile('root = 5\n')], ['root', 'expected a string', 'integer 5']);
    fails(
      ['--config', tomlFile('[cni]\nbin_dirs = "/opt/cni/bin"\n')],
      ['cni.bin_dirs', 'expected an array'],
    );
    fails(['--config', tomlFile('[cni]\nbin_dirs = ["/a", 3]\n')], ['cni.bin_dirs[1]', 'expected a string']);
    fails(['--config', tomlFile('[cni]\nbin_dirs = []\n')], ['cni.bin_dirs', 'at least one']);
    fails(['--config', tomlFile('cni = "x"\n')], ['cni', 'expected a table']);
    fails(['--config', tomlFile('[runtime]\ntimeout = 30\n')], ['runtime.timeout', 'duration']);
  });

  it('rejects a bad log level in the file', () => {
    const path = tomlFile('log_level = "verbose"\n');
    fails(['--config', path], [path, 'log_level', '"verbose"', 'trace']);
  });

  it('rejects a relative path in the file', () => {
    const path = tomlFile('[netns]\ndir = "run/netns"\n');
    fails(['--config', path], [path, 'netns.dir', 'absolute', '"run/netns"']);
  });

  it('rejects bad durations', () => {
    fails(['--config', tomlFile('[cni]\ntimeout = "30"\n')], ['cni.timeout', '"30"']);
    fails(['--config', tomlFile('[cni]\ntimeout = "0s"\n')], ['cni.timeout', 'at least']);
    fails(['--config', tomlFile('[pod]\nstop_grace_period = "25h"\n')], ['pod.stop_grace_period', 'at most']);
  });

  it('reports TOML syntax errors with the file and line', () => {
    const path = tomlFile('root = "/a"\nstate = \n');
    fails(['--config', path], [path, 'invalid TOML', 'line 2']);
  });

  it('fails when an explicitly named config file is missing', () => {
    const path = join(dir, 'missing.toml');
    fails(['--config', path], ['--config', path, 'does not exist']);
  });

  it('rejects a world-writable config file when running as root', { skip: process.geteuid?.() !== 0 }, () => {
    const path = tomlFile('');
    chmodSync(path, 0o666);
    fails(['--config', path], [path, 'writable by every user']);
  });
});

describe('loadConfig flags', () => {
  it('override the config file', () => {
    const path = tomlFile(FULL_FILE);
    const config = run([
      '--config',
      path,
      '--socket',
      '/tmp/b.sock',
      '--root=/data/berth',
      '--log-level',
      'error',
      '--cni-bin-dir',
      '/flag/bin',
    ]);
    assert.equal(config.socket, '/tmp/b.sock');
    assert.equal(config.rootDir, '/data/berth');
    assert.equal(config.logLevel, 'error');
    assert.deepEqual(config.cniBinDirs, ['/flag/bin']);
    assert.equal(config.stateDir, '/srv/berth/run', 'file value kept where no flag is given');
  });

  it('accept --flag=value and --flag value alike', () => {
    const spaced = run(['--state', '/s', '--cni-conf-dir', '/c', '--netns-dir', '/n', '--runtime', 'crun']);
    const joined = run(['--state=/s', '--cni-conf-dir=/c', '--netns-dir=/n', '--runtime=crun']);
    assert.deepEqual(spaced, joined);
    assert.equal(joined.stateDir, '/s');
    assert.equal(joined.cniConfDir, '/c');
    assert.equal(joined.netnsDir, '/n');
    assert.equal(joined.runtime, 'crun');
  });

  it('accept a socket path with or without unix://', () => {
    assert.equal(run(['--socket', 'unix:///run/x/y.sock']).socket, '/run/x/y.sock');
    assert.equal(run(['--socket=unix:///run/x/y.sock']).socket, '/run/x/y.sock');
    assert.equal(run(['--socket', '/run/x/y.sock']).socket, '/run/x/y.sock');
    fails(['--socket', 'tcp://127.0.0.1:1234'], ['--socket', 'unix']);
    fails(['--socket', 'unix://relative.sock'], ['--socket', 'absolute']);
    fails(['--socket', `/${'a'.repeat(120)}`], ['--socket', 'longer than']);
  });

  it('collect repeated and comma-separated --cni-bin-dir', () => {
    assert.deepEqual(run(['--cni-bin-dir', '/a,/b', '--cni-bin-dir=/c']).cniBinDirs, ['/a', '/b', '/c']);
    fails(['--cni-bin-dir', '/a,,/b'], ['--cni-bin-dir', 'empty path']);
  });

  it('take a PATH-style --cni-bin-dir list as several dirs, as CNI_PATH is written', () => {
    assert.deepEqual(run(['--cni-bin-dir', '/opt/cni/bin:/usr/lib/cni']).cniBinDirs, [
      '/opt/cni/bin',
      '/usr/lib/cni',
    ]);
    fails(['--cni-bin-dir', '/a::/b'], ['--cni-bin-dir', 'empty path']);
  });

  it('let the last occurrence of a flag win', () => {
    assert.equal(run(['--log-level', 'debug', '--log-level=warn']).logLevel, 'warn');
  });

  it('reject an unknown flag, naming it', () => {
    fails(['--sockett', '/x'], ['unknown flag --sockett']);
    fails(['--root=/r', '--bogus=1'], ['unknown flag --bogus']);
    fails(['-x'], ['unknown flag -x']);
  });

  it('reject a flag without its value', () => {
    fails(['--root'], ['--root needs a value']);
    fails(['--root', '--state', '/s'], ['--root needs a value']);
  });

  it('reject positional arguments', () => {
    fails(['serve'], ['unexpected argument "serve"']);
    fails(['--', 'x'], ['unexpected argument "x"']);
  });

  it('reject a bad log level', () => {
    fails(['--log-level', 'verbose'], ['--log-level', '"verbose"', 'info']);
  });

  it('reject relative paths', () => {
    fails(['--root', 'var/lib/berth'], ['--root', 'absolute', '"var/lib/berth"']);
    fails(['--cni-conf-dir=./net.d'], ['--cni-conf-dir', 'absolute']);
    fails(['--runtime', './runc'], ['--runtime', 'absolute']);
  });

  it('normalize paths', () => {
    assert.equal(run(['--root', '/var//lib/berth/']).rootDir, '/var/lib/berth');
  });

  it('reject identical root and state directories', () => {
    fails(['--root', '/x', '--state', '/x/'], ['root and state']);
  });

  it('resolve a relative --config against the working directory', () => {
    tomlFile('log_level = "trace"\n');
    const name = `c${fileCount - 1}.toml`;
    assert.equal(run(['--config', name], { ...opts, cwd: dir }).logLevel, 'trace');
  });
});

describe('loadConfig cgroup driver', () => {
  it('accepts systemd on a systemd host', () => {
    assert.equal(
      run(['--cgroup-driver', 'systemd'], { ...opts, hostRunsSystemd: () => true }).cgroupDriver,
      'systemd',
    );
  });

  it('rejects systemd on a host without systemd, naming the flag', () => {
    fails(['--cgroup-driver=systemd'], ['--cgroup-driver', 'systemd', '/run/systemd/system']);
  });

  it('rejects systemd from the file on a host without systemd, naming the key', () => {
    const path = tomlFile('cgroup_driver = "systemd"\n');
    fails(['--config', path], [path, 'cgroup_driver', '/run/systemd/system']);
  });

  it('rejects an unknown driver', () => {
    fails(['--cgroup-driver', 'cgroupv2'], ['--cgroup-driver', '"cgroupv2"']);
  });

  it('lets a flag fix a systemd setting from the file', () => {
    const path = tomlFile('cgroup_driver = "systemd"\n');
    assert.equal(run(['--config', path, '--cgroup-driver', 'cgroupfs']).cgroupDriver, 'cgroupfs');
  });
});

describe('loadConfig help and version', () => {
  it('lists every flag with its default', () => {
    for (const argv of [['--help'], ['-h']]) {
      const result = loadConfig(argv, opts);
      assert.equal(result.kind, 'help');
      if (result.kind !== 'help') return;
      const d = defaultConfig();
      for (const [flag, def] of [
        ['--config', join(dir, 'absent.toml')],
        ['--socket', d.socket],
        ['--root', d.rootDir],
        ['--state', d.stateDir],
        ['--cni-conf-dir', d.cniConfDir],
        ['--cni-bin-dir', d.cniBinDirs.join(',')],
        ['--netns-dir', d.netnsDir],
        ['--runtime', d.runtime],
        ['--cgroup-driver', d.cgroupDriver],
        ['--log-level', d.logLevel],
      ] as const) {
        const line = result.text.split('\n').find((l) => l.trimStart().startsWith(`${flag} `));
        assert.ok(line, `help lacks ${flag}`);
        assert.ok(line.includes(`(default ${def})`), `help line for ${flag} lacks its default: ${line}`);
      }
      for (const k of ['[cni]', 'conf_dir', 'bin_dirs', '[netns]', '[runtime]', 'stop_grace_period']) {
        assert.ok(result.text.includes(k), `help lacks config key ${k}`);
      }
      assert.ok(result.text.includes('--version'));
    }
  });

  it('answers --help without reading a broken config file', () => {
    const path = tomlFile('this is not toml');
    assert.equal(loadConfig(['--config', path, '--help'], opts).kind, 'help');
  });

  it('reports the package.json version', () => {
    const pkgUrl = new URL('../../../package.json', import.meta.url);
    const pkg = JSON.parse(readFileSync(pkgUrl, 'utf8')) as { version: string };
    assert.deepEqual(loadConfig(['--version'], opts), { kind: 'version', text: `berthd ${pkg.version}` });
  });

  it('rejects a value on a switch', () => {
    fails(['--help=yes'], ['--help takes no value']);
  });
});

describe('formatDuration', () => {
  it('round-trips through the duration syntax', () => {
    assert.equal(formatDuration(0), '0s');
    assert.equal(formatDuration(90_000), '1m30s');
    assert.equal(formatDuration(1500), '1s500ms');
    assert.equal(formatDuration(3_600_000), '1h');
  });
});

describe('runtime handlers setting', () => {
  it('takes handlers from repeated --runtime-handler flags, replacing the file', () => {
    const path = tomlFile('[runtime.handlers.fast]\npath = "/usr/bin/crun"\nroot = "/run/crun"\n');
    const config = run([
      '--config',
      path,
      '--runtime-handler',
      'a=runc:/run/a',
      '--runtime-handler=b=/usr/sbin/runc:/run/b/',
    ]);
    assert.deepEqual(config.runtimeHandlers, [
      { name: 'a', path: 'runc', root: '/run/a' },
      { name: 'b', path: '/usr/sbin/runc', root: '/run/b' },
    ]);
  });

  it('refuses bad handlers, naming the flag or the key', () => {
    fails(['--runtime-handler', 'a=runc'], ['--runtime-handler', 'NAME=PATH:ROOT']);
    fails(['--runtime-handler', 'Fast=runc:/run/f'], ['--runtime-handler', '"Fast"', 'DNS label']);
    fails(
      ['--runtime-handler', 'runc=runc:/run/f'],
      ['--runtime-handler', 'default handler', 'runtime.path'],
    );
    fails(['--runtime-handler', 'a=runc:relative'], ['--runtime-handler', 'absolute']);
    fails(
      ['--runtime-handler', 'a=runc:/run/x', '--runtime-handler', 'b=runc:/run/x'],
      ['--runtime-handler', '"a" and "b" share root /run/x'],
    );
    fails(
      ['--config', tomlFile('[runtime.handlers.fast]\npath = "/usr/bin/crun"\n')],
      ['runtime.handlers.fast.root', 'expected a string'],
    );
    fails(
      ['--config', tomlFile('[runtime.handlers.fast]\npath = "crun"\nroot = "/r"\nsystemd = true\n')],
      ['runtime.handlers.fast', 'unknown key "systemd"'],
    );
    fails(
      ['--config', tomlFile('[runtime]\nhandlers = "fast"\n')],
      ['runtime.handlers', 'table of handlers'],
    );
  });
});
