#!/usr/bin/env bash
# Builds the web UI (web-ui/dist) that `stead` embeds: `npm ci` from the committed lockfile,
# then the type check and the Vite build. Sourced by run.sh and test.sh before cargo builds.
# With NPM_TEST=1 it also runs the Vitest unit tests.
set -euo pipefail
command -v npm >/dev/null || { echo "error: npm is needed to build the web UI (Debian: apt-get install nodejs npm)" >&2; exit 1; }
(
  cd "$(dirname "${BASH_SOURCE[0]}")/../web-ui"
  # npm ci only when the installed tree does not match the lockfile.
  if [ ! -f node_modules/.package-lock.json ] || ! cmp -s package-lock.json node_modules/.stead-lock; then
    npm ci --no-audit --no-fund --loglevel=error
    cp package-lock.json node_modules/.stead-lock
  fi
  if [ "${NPM_TEST:-0}" = 1 ]; then
    npm test --silent
  fi
  npm run build --silent
)
