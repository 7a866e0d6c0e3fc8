#!/usr/bin/env bash
# Brings a Debian 12 machine (root, Node 20 present) to the point where berth builds, runs and tests.
# Idempotent: installs only what is missing; a second run installs nothing and only rebuilds.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

say() { printf 'setup: %s\n' "$*"; }
die() {
  printf 'setup: error: %s\n' "$*" >&2
  exit 1
}

# --- Node -------------------------------------------------------------------------------------
# 20.10 is the first Node 20 with `node --test --test-concurrency` (scripts/test.sh).
node_min_major=20
node_min_minor=10
command -v node >/dev/null 2>&1 || die "node is not installed; install Node.js ${node_min_major} first"
node_version=$(node -p 'process.versions.node')
IFS=. read -r node_major node_minor _ <<<"$node_version"
if ((node_major < node_min_major || (node_major == node_min_major && node_minor < node_min_minor))); then
  die "node ${node_version} is too old; need >= ${node_min_major}.${node_min_minor}"
fi
command -v npm >/dev/null 2>&1 || die "npm is not installed"

# --- Debian packages --------------------------------------------------------------------------
# Runtime: runc, CNI plugins, conmon, catatonit (pod infra init), iproute2, iptables (portmap,
# ipMasq), util-linux (nsenter, mount), attr (setfattr: layer xattrs and overlay opaque dirs), zstd,
# socat (port-forward: a TCP connection made inside a pod's network namespace), procps (sysctl: a
# pod's hostname and sysctls written inside its new namespaces when it runs without an infra),
# criu (checkpoint and restore, where its `criu check` passes on the node's kernel; berth reports
# them unavailable, with criu's reason, where it does not); crun (a second runtime handler, the
# cluster suite's RuntimeClass); etcd-server and conntrack (the cluster suites' etcd, and what
# kube-proxy needs; Debian's own etcd service is stopped and disabled below).
# Image tests: docker-registry, skopeo, busybox-static, apache2-utils (htpasswd for registry auth);
# openssl (a self-signed certificate for the streaming server's TLS test); gcc and libc6-dev (static
# test programs: critest's nginx and nonewprivs stand-ins, the seccomp probe).
packages=(
  runc containernetworking-plugins conmon catatonit iproute2 iptables util-linux
  attr zstd socat procps criu crun etcd-server conntrack
  docker-registry skopeo busybox-static apache2-utils openssl gcc libc6-dev
)
missing=()
for pkg in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$pkg")
done
if ((${#missing[@]} > 0)); then
  [[ $(id -u) -eq 0 ]] || die "need root to install: ${missing[*]}"
  say "installing ${missing[*]}"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  say "debian packages present"
fi
# The cluster suites start an etcd of their own on free loopback ports; the one Debian's package
# starts as a service at install (where systemd runs) would only hold a port and a data dir.
if [[ -d /run/systemd/system ]] && systemctl is-enabled --quiet etcd.service 2>/dev/null; then
  systemctl disable --now etcd.service >/dev/null 2>&1 || say "could not disable Debian's etcd service"
fi

# --- busybox for critest's images ------------------------------------------------------------
# The CRI validation suite (test/e2e/critest.test.ts) needs a busybox whose shell execs /bin/ls
# rather than running its applet: Debian's dynamic busybox. It conflicts with busybox-static, so it
# is only downloaded here, into apt's archive, and the test unpacks it.
if [[ $(dpkg --print-architecture) == amd64 ]] && ! compgen -G '/var/cache/apt/archives/busybox_*_amd64.deb' >/dev/null; then
  say "downloading busybox .deb for the critest images"
  (cd /var/cache/apt/archives && apt-get download -q busybox) || say "busybox .deb not downloaded: critest's MaskedPaths spec will be skipped"
fi

# --- npm dependencies -------------------------------------------------------------------------
# The stamp holds the hash of the package-lock.json last installed; npm ci wipes node_modules,
# so a stale stamp cannot survive a reinstall.
stamp=node_modules/.berth-lock.sha256
lock_hash=$(sha256sum package-lock.json | cut -d' ' -f1)
if [[ -d node_modules && -f "$stamp" && "$(cat "$stamp")" == "$lock_hash" ]]; then
  say "node_modules up to date"
elif [[ -d node_modules && ! -f "$stamp" && -f node_modules/.package-lock.json &&
  ! package-lock.json -nt node_modules/.package-lock.json ]]; then
  # Installed by hand (npm ci/install) after the last lock change: npm's own hidden lockfile,
  # written at the end of every install, is at least as new as package-lock.json. Adopt it.
  say "node_modules up to date (installed by npm; recording the lock hash)"
  printf '%s\n' "$lock_hash" >"$stamp"
else
  say "npm ci"
  npm ci --include=dev --no-audit --no-fund
  printf '%s\n' "$lock_hash" >"$stamp"
fi

# --- build ------------------------------------------------------------------------------------
# The CRI wire types are generated from proto/ by every build rather than committed, so they
# cannot go stale (npm run build: npm run generate, then tsc).
say "building (wire types from proto/, then tsc)"
npm run --silent build

# Drop compiled files whose source is gone, so a deleted test or module cannot linger in dist/.
for out in dist/src dist/state dist/test dist/bench; do
  [[ -d "$out" ]] || continue
  while IFS= read -r -d '' js; do
    src=${js#dist/}
    src=${src%.js}.ts
    if [[ ! -e "$src" ]]; then
      say "removing stale ${js}"
      rm -f -- "$js" "$js.map" "${js%.js}.d.ts"
    fi
  done < <(find "$out" -type f -name '*.js' -print0)
done
say "ready"
