#!/usr/bin/env bash
# Builds the web UI and Stead (release, the UI embedded), prepares ONNX Runtime and the local model (`stead setup`: cached after
# the first run), and runs the server on the embedded default: SQLite under ./.stead,
# http://127.0.0.1:8787. Extra arguments go to `stead serve` (e.g. --listen, --config).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
source scripts/ensure-python-venv.sh
source scripts/ensure-cxx.sh
bash scripts/build-web-ui.sh
cargo build --release --locked --bin stead
stead="$CARGO_TARGET_DIR/release/stead"
"$stead" setup
exec "$stead" serve "$@"
