#!/usr/bin/env bash
# Builds Stead (release) and runs the server on the embedded default: SQLite under ./.stead,
# http://127.0.0.1:8787. Extra arguments go to `stead serve` (e.g. --listen, --config).
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo run --release --locked --bin stead -- serve "$@"
