#!/usr/bin/env bash
# Installs what vt builds and tests with, from Debian 12 packages.
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# npm: Debian's, unless one is installed already (NodeSource's nodejs carries its own
# npm and conflicts with Debian's package)
npm_pkg=npm
if command -v npm >/dev/null; then npm_pkg=""; fi
$SUDO apt-get install -y -qq --no-install-recommends \
  build-essential cmake pkg-config clang libclang-rt-14-dev \
  libyaml-dev libinih-dev libcmocka-dev libutf8proc-dev libcjson-dev libmicrohttpd-dev \
  hipcc libamdhip64-dev rocm-device-libs \
  dpkg-dev file lintian \
  python3 python3-jinja2 \
  nodejs $npm_pkg curl >/dev/null # Debian packages: cpack -G DEB, dpkg-shlibdeps, lintian; the
  # chat-template reference (test_jinja); vt serve's client tests
# the official OpenAI Node SDK, pinned by tests/serve/package-lock.json (the test
# serve_openai_node runs it against vt serve)
npm ci --prefix "$(dirname "$0")/../tests/serve" --no-audit --no-fund --loglevel=error >/dev/null
