#!/usr/bin/env bash
# Install what elastic-agent needs, only what is missing: the Debian packages
# (when pkg-config or the command cannot find them), then the project's
# virtualenv with the Python packages pinned in requirements.txt (torch from
# PyPI among them), made again only when that file changes.  Called by
# `make check`, `make demo`, …
# Set EA_DEPS_EXTRA="fio" to add the benchmark baselines' Debian packages.
# EA_VENV=DIR puts the virtualenv elsewhere (default: .venv in the checkout).
set -euo pipefail

declare -A pc=(
  [libuv]=libuv1-dev [msgpack]=libmsgpack-dev [yaml-0.1]=libyaml-dev
  [libxxhash]=libxxhash-dev [liburing]=liburing-dev [check]=check
  [libsodium]=libsodium-dev [openblas]=libopenblas-dev [jansson]=libjansson-dev
  [libmicrohttpd]=libmicrohttpd-dev [libcurl]=libcurl4-openssl-dev
)
cd "$(dirname "$0")/.."
# chromium: tests/e2e/test_page.sh looks at the agent's page with it (headless).
declare -A cmd=([pkg-config]=pkg-config [ip]=iproute2 [python3]=python3 [nft]=nftables [clang]=clang [clang-format]=clang-format [curl]=curl [chromium]=chromium)

missing=()
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
for m in "${!pc[@]}"; do
  pkg-config --exists "$m" 2>/dev/null || missing+=("${pc[$m]}")
done
for c in "${!cmd[@]}"; do
  command -v "$c" >/dev/null 2>&1 || missing+=("${cmd[$c]}")
done
# python3-venv: Debian's python3 makes the project's virtualenv (a pyenv shim
# on PATH may not be Debian's python3; /usr/bin/python3 is).
for p in python3-venv ${EA_DEPS_EXTRA:-}; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exec scripts/venv.sh

echo "deps: installing ${missing[*]}" >&2
if [ "$(id -u)" -ne 0 ]; then
  SUDO=sudo
  command -v sudo >/dev/null || { echo "deps: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
else
  SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
exec scripts/venv.sh
