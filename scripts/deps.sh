#!/usr/bin/env bash
# Installs what vt builds and tests with, from Debian 12 packages.
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
  build-essential cmake pkg-config clang libclang-rt-14-dev \
  libyaml-dev libinih-dev libcmocka-dev libutf8proc-dev libcjson-dev libmicrohttpd-dev \
  hipcc libamdhip64-dev rocm-device-libs \
  dpkg-dev file lintian >/dev/null # Debian packages: cpack -G DEB, dpkg-shlibdeps, lintian
