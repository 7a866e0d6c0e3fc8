#!/usr/bin/env bash
# Installs what the host needs to build and boot the Debian 13 VM: debootstrap and qemu. Only the
# test commands call it (npm test, npm run test:vm): `npm start` needs neither. Idempotent.
set -euo pipefail

say() { printf 'vm-setup: %s\n' "$*" >&2; }

packages=(debootstrap qemu-system-x86 e2fsprogs)
missing=()
for pkg in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$pkg")
done
((${#missing[@]} > 0)) || exit 0
if [[ $(id -u) -ne 0 ]]; then
  say "need root to install: ${missing[*]}"
  exit 1
fi
say "installing ${missing[*]}"
apt-get update -q >&2
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
