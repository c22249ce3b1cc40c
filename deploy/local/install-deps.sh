#!/usr/bin/env bash
# Installs the Debian packages in deploy/debian-packages.txt that are missing.
# A line "a | b" is satisfied by either package installed, else installs a:
# for packages that conflict, so that the set-up never removes one a user has.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mapfile -t pkgs < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$here/../debian-packages.txt")
missing=()
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for line in "${pkgs[@]}"; do
  read -r -a alternatives <<<"${line//|/ }"
  have=
  for p in "${alternatives[@]}"; do
    if installed "$p"; then have=1; break; fi
  done
  [ -n "$have" ] || missing+=("${alternatives[0]}")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
# Retries: a transient archive hiccup must not fail a fresh machine's set-up.
$sudo apt-get -o Acquire::Retries=3 update -q
$sudo apt-get -o Acquire::Retries=3 install -y -q --no-install-recommends "${missing[@]}"
