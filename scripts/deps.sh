#!/usr/bin/env bash
# Install the Debian packages elastic-agent needs, only when pkg-config (or the
# command) cannot find them already.  Called by `make check`, `make demo`, …
# Set EA_DEPS_EXTRA="fio python3-torch" to add the benchmark baselines.
set -euo pipefail

declare -A pc=(
  [libuv]=libuv1-dev [msgpack]=libmsgpack-dev [yaml-0.1]=libyaml-dev
  [libxxhash]=libxxhash-dev [liburing]=liburing-dev [check]=check
  [libsodium]=libsodium-dev [openblas]=libopenblas-dev [jansson]=libjansson-dev
  [libmicrohttpd]=libmicrohttpd-dev
)
declare -A cmd=([pkg-config]=pkg-config [ip]=iproute2 [python3]=python3 [nft]=nftables [clang]=clang [clang-format]=clang-format [curl]=curl)

missing=()
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
for m in "${!pc[@]}"; do
  pkg-config --exists "$m" 2>/dev/null || missing+=("${pc[$m]}")
done
for c in "${!cmd[@]}"; do
  command -v "$c" >/dev/null 2>&1 || missing+=("${cmd[$c]}")
done
# Python packages the tests use, for Debian's /usr/bin/python3 (not a pyenv
# shim): the client package's tests and the PyTorch end-to-end tests.
for p in python3-msgpack python3-pytest python3-torch ${EA_DEPS_EXTRA:-}; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

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
