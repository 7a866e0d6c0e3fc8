#!/usr/bin/env bash
# Installs what is missing, installs the default CNI network when the host has none, starts berthd.
# Every argument is passed to berthd (see `npm start -- --help`).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

say() { printf 'start: %s\n' "$*"; }
die() {
  printf 'start: error: %s\n' "$*" >&2
  exit 1
}

bash scripts/setup.sh

# The CNI conf dir berthd will use: defaults < config file < flags, resolved by berthd's own loader.
# Empty when berthd will not run (--help, --version, a config error it will report itself).
conf_dir=$(
  BERTH_LOAD_JS="$PWD/dist/src/config/load.js" node --input-type=module -e '
    import { pathToFileURL } from "node:url";
    const { loadConfig } = await import(pathToFileURL(process.env.BERTH_LOAD_JS).href);
    try {
      const r = loadConfig(process.argv.slice(1));
      if (r.kind === "run") process.stdout.write(r.config.cniConfDir);
    } catch {}
  ' -- "$@"
)

default_net=config/cni/10-berth-bridge.conflist
subnet=10.207.0.0/16
bridge=berth0

ip_to_int() {
  local a b c d
  IFS=. read -r a b c d <<<"$1"
  echo $(((a << 24) | (b << 16) | (c << 8) | d))
}

# overlaps A/LEN B/LEN: true when the two IPv4 prefixes share any address.
overlaps() {
  local a=${1%/*} la=32 b=${2%/*} lb=${2#*/}
  [[ "$1" == */* ]] && la=${1#*/}
  local m=$((la < lb ? la : lb))
  local ia ib
  ia=$(ip_to_int "$a")
  ib=$(ip_to_int "$b")
  (((ia >> (32 - m)) == (ib >> (32 - m))))
}

is_ipv4_prefix() { [[ "$1" =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+(/[0-9]+)?$ ]]; }

# Routes and addresses already using the subnet, other than our own bridge from an earlier start.
subnet_users() {
  local line word words
  while read -r line; do
    [[ " $line " == *" dev $bridge "* ]] && continue
    # The destination is the first word that is a prefix ("blackhole 10.1.0.0/16" has a type first).
    read -ra words <<<"$line"
    for word in "${words[@]}"; do
      [[ "$word" == default ]] && break
      if is_ipv4_prefix "$word"; then
        if overlaps "$word" "$subnet"; then printf '  route: %s\n' "$line"; fi
        break
      fi
    done
  done < <(ip -4 route show)
  local _idx ifname _family cidr _rest
  while read -r _idx ifname _family cidr _rest; do
    [[ "$ifname" == "$bridge" ]] && continue
    if is_ipv4_prefix "$cidr" && overlaps "$cidr" "$subnet"; then
      printf '  address: %s on %s\n' "$cidr" "$ifname"
    fi
  done < <(ip -4 -o addr show)
  return 0
}

if [[ -n "$conf_dir" ]]; then
  if [[ -n "$(find "$conf_dir" -maxdepth 1 \( -type f -o -type l \) \
    \( -name '*.conf' -o -name '*.conflist' -o -name '*.json' \) -print -quit 2>/dev/null)" ]]; then
    say "CNI network config present in ${conf_dir}"
  else
    users=$(subnet_users)
    if [[ -n "$users" ]]; then
      die "no CNI network config in ${conf_dir}, and the default network's subnet ${subnet} is in use here:
${users}
Write a network config for a free subnet into ${conf_dir} (see ${default_net})."
    fi
    say "no CNI network config in ${conf_dir}: installing ${default_net} (bridge ${bridge}, ${subnet})"
    install -D -m 0644 "$default_net" "${conf_dir}/$(basename "$default_net")"
  fi
fi

say "starting berthd"
exec bin/berthd "$@"
