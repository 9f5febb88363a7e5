#!/usr/bin/env bash
# Services the fleet tests start themselves on 127.0.0.1 (tests/lib/services.py): redis-server from Debian.
# Idempotent and guarded: installs only what is missing, only as root with apt-get; otherwise says why and
# leaves it to the tests, which then skip with a one-line reason.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then
  echo "== services: redis-server present ($(redis-server --version | cut -d' ' -f3))"
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "== services: redis-server missing and cannot install it here (needs root and apt-get); its tests will skip"
  exit 0
fi
echo "== services: installing redis-server"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q --no-install-recommends redis-server >/dev/null 2>&1 \
  || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends redis-server >/dev/null; }
# The package may start a system-wide instance; the tests start their own on free ports and need none.
if command -v service >/dev/null 2>&1; then service redis-server stop >/dev/null 2>&1 || true; fi
redis-server --version
