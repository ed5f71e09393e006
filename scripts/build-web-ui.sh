#!/usr/bin/env bash
# Builds Stead's JavaScript (npm workspaces, one lockfile: package-lock.json at the root): `npm ci`
# from the committed lockfile, the client packages (@stead/client, @stead/react, @stead/ai-sdk,
# into their dist/), then the web UI (web-ui/dist) that `stead` embeds. Sourced by run.sh and
# test.sh before cargo builds. With NPM_TEST=1 it also runs the Vitest unit tests (the client
# packages' and the web UI's) and builds the AI SDK example app (examples/ai-sdk-chat/dist).
set -euo pipefail
command -v npm >/dev/null || { echo "error: npm is needed to build the web UI (Debian: apt-get install nodejs npm)" >&2; exit 1; }
(
  cd "$(dirname "${BASH_SOURCE[0]}")/.."
  # npm ci only when the installed tree does not match the lockfile.
  if [ ! -f node_modules/.package-lock.json ] || ! cmp -s package-lock.json node_modules/.stead-lock; then
    npm ci --no-audit --no-fund --loglevel=error
    cp package-lock.json node_modules/.stead-lock
  fi
  npm run build --silent -w @stead/client -w @stead/react -w @stead/ai-sdk
  if [ "${NPM_TEST:-0}" = 1 ]; then
    npm test --silent -w @stead/client -w @stead/ai-sdk -w stead-web-ui
    # Each package packs (what `npm pack` would publish: dist/, src/, README).
    npm pack --dry-run --silent -w @stead/client -w @stead/react -w @stead/ai-sdk >/dev/null
  fi
  npm run build --silent -w stead-web-ui
  if [ "${NPM_TEST:-0}" = 1 ]; then
    npm run build --silent -w stead-example-ai-sdk-chat
  fi
)
