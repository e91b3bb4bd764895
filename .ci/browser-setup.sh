#!/usr/bin/env bash
# Make the browser tests runnable: Debian's Chromium (apt), Playwright (pip, already in the dev
# extras) and axe-core (npm, for the accessibility checks; outside the repo, never committed).
# Playwright drives the system browser through executable_path; `playwright install` is never run
# (no browser download). Idempotent: each step checks first.
set -euo pipefail

die() { echo "browser-setup: ERROR: $*" >&2; exit 1; }
if [ "$(id -u)" != 0 ]; then die "must run as root (installs packages)"; fi

if ! command -v chromium >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
python3 -c "import playwright" 2>/dev/null || python3 -m pip install -q playwright
AXE_DIR=/var/cache/coderoom-ci/axe
if [ ! -f "$AXE_DIR/node_modules/axe-core/axe.min.js" ]; then
  if ! command -v npm >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null
  fi
  npm install --silent --no-audit --no-fund --prefix "$AXE_DIR" axe-core@4 >/dev/null || die "npm install axe-core failed"
fi
echo "browser: $(chromium --version 2>/dev/null | head -n1); playwright $(python3 -c 'from importlib.metadata import version; print(version("playwright"))'); axe-core $(node -p "require('$AXE_DIR/node_modules/axe-core/package.json').version")"
