#!/usr/bin/env bash
# Runs Debian's containerd beside berth for the side-by-side benchmark
# (`npm run bench -- --compare unix:///run/containerd-bench/containerd.sock`): its own config, state,
# CNI network (cbench0, 10.211.0.0/24) and a docker-registry on 127.0.0.1:5055 as its only mirror,
# holding the benchmark's images (the pause image its config names among them).
# Idempotent: installs the configs from bench/containerd/, starts what is not running, and pushes the
# images again (a push of what is there changes nothing). Nothing it starts reaches past loopback.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

conf_dir=/etc/containerd-bench
socket=/run/containerd-bench/containerd.sock
registry_addr=127.0.0.1:5055
registry_log=/var/log/containerd-bench-registry.log
registry_pidfile=/run/containerd-bench-registry.pid
containerd_log=/var/log/containerd-bench.log
containerd_pidfile=/run/containerd-bench.pid
wait_seconds=30

say() { printf 'bench-containerd: %s\n' "$*"; }
die() {
  printf 'bench-containerd: error: %s\n' "$*" >&2
  exit 1
}

[[ $(id -u) -eq 0 ]] || die "run as root: containerd needs it"
for bin in containerd ctr docker-registry runc; do
  command -v "$bin" >/dev/null 2>&1 || die "$bin is missing (apt-get install containerd docker-registry runc)"
done

# --- configs ----------------------------------------------------------------------------------
# config.toml names the other files by their place under $conf_dir.
install -D -m 0644 bench/containerd/config.toml "$conf_dir/config.toml"
install -D -m 0644 bench/containerd/registry.yml "$conf_dir/registry.yml"
install -D -m 0644 bench/containerd/net.d/10-cbench.conflist "$conf_dir/net.d/10-cbench.conflist"
install -D -m 0644 "bench/containerd/certs.d/$registry_addr/hosts.toml" "$conf_dir/certs.d/$registry_addr/hosts.toml"

# A pid file is only believed while its process is alive and is the program it should be.
alive() {
  local pidfile=$1 program=$2 pid
  [[ -f "$pidfile" ]] || return 1
  pid=$(cat "$pidfile")
  [[ -n "$pid" && -r "/proc/$pid/cmdline" ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "$program"
}

# Polls `check` (a command) once every 0.1 s until it succeeds or $wait_seconds pass.
wait_until() {
  local what=$1
  shift
  for _ in $(seq $((wait_seconds * 10))); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  die "$what did not come up within ${wait_seconds}s"
}

registry_answers() { timeout 2 bash -c "exec 3<>/dev/tcp/${registry_addr%:*}/${registry_addr#*:}" 2>/dev/null; }
containerd_answers() { timeout 5 ctr --address "$socket" version; }

# --- registry ---------------------------------------------------------------------------------
if alive "$registry_pidfile" "docker-registry"; then
  say "docker-registry already running (pid $(cat "$registry_pidfile"))"
elif registry_answers; then
  # Started by hand, or by an earlier run whose pid file is gone: the push below tells if it is one.
  say "a registry already listens on $registry_addr; using it"
else
  say "starting docker-registry on $registry_addr (log $registry_log)"
  setsid docker-registry serve "$conf_dir/registry.yml" >>"$registry_log" 2>&1 </dev/null &
  echo $! >"$registry_pidfile"
fi
wait_until "docker-registry on $registry_addr" registry_answers

# --- containerd -------------------------------------------------------------------------------
if alive "$containerd_pidfile" "$conf_dir/config.toml"; then
  say "containerd already running (pid $(cat "$containerd_pidfile"))"
elif containerd_answers; then
  say "a containerd already answers on $socket; using it"
else
  say "starting containerd on $socket (log $containerd_log)"
  setsid containerd --config "$conf_dir/config.toml" >>"$containerd_log" 2>&1 </dev/null &
  echo $! >"$containerd_pidfile"
fi
wait_until "containerd on $socket" containerd_answers

# --- images -----------------------------------------------------------------------------------
# The same images, byte for byte, that the benchmark pushes to berth's own registry.
[[ -f dist/bench/push-images.js ]] || bash scripts/setup.sh
node dist/bench/push-images.js "$registry_addr"
say "ready: npm run bench -- --compare unix://$socket"
