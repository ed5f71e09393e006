#!/usr/bin/env bash
# Runs every test of the project: model preparation (`stead setup`, cached), formatting, lints,
# and the whole test suite on both database backends and the real local model. PostgreSQL: DATABASE_URL when it is set (postgres://…, a user that may CREATE
# DATABASE); otherwise a throwaway cluster started here with initdb/pg_ctl under the target dir
# (Debian's `postgresql` package is installed with apt-get when missing and we are root).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

step() { printf '\n==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

pg_bin_dir() {
  local dir
  dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  [ -n "$dir" ] && [ -x "$dir/initdb" ] && echo "$dir"
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

stop_throwaway_postgres() {
  "${as[@]}" "$bin/pg_ctl" -D "$pg_dir/data" -m fast -w stop >/dev/null 2>&1 || true
  rm -rf "$pg_dir"
}

# Globals of the throwaway cluster: its binaries, the user that runs them, its directory.
bin="" pg_dir="" as=()

start_throwaway_postgres() {
  bin=$(pg_bin_dir || true)
  if [ -z "$bin" ]; then
    if [ "$(id -u)" = 0 ]; then
      step "installing PostgreSQL (apt-get install postgresql)"
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
      bin=$(pg_bin_dir) || die "postgresql installed but initdb not found under /usr/lib/postgresql"
    else
      die "PostgreSQL is needed for the tests: set DATABASE_URL=postgres://… or install Debian's postgresql package (sudo apt-get install postgresql)"
    fi
  fi

  # initdb and pg_ctl refuse to run as root: run them as the `postgres` user then.
  as=()
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --home-dir /var/lib/postgresql --shell /bin/sh postgres
    as=(runuser -u postgres --)
  fi

  pg_dir="$CARGO_TARGET_DIR/pg-test"
  rm -rf "$pg_dir"
  mkdir -p "$pg_dir"
  if [ ${#as[@]} -gt 0 ]; then
    chown postgres: "$pg_dir"
    # The postgres user must be able to reach the directory; fall back to /tmp if it can't.
    if ! "${as[@]}" test -w "$pg_dir"; then
      rmdir "$pg_dir"
      pg_dir=$(mktemp -d /tmp/stead-pg-test.XXXXXX)
      chown postgres: "$pg_dir"
    fi
  fi
  local port
  port=$(free_port)
  step "starting a throwaway PostgreSQL ($bin) on 127.0.0.1:$port in $pg_dir"
  "${as[@]}" "$bin/initdb" -D "$pg_dir/data" -U postgres --auth=trust -E UTF8 >"$pg_dir/initdb.log" 2>&1 \
    || { cat "$pg_dir/initdb.log" >&2; die "initdb failed"; }
  "${as[@]}" "$bin/pg_ctl" -D "$pg_dir/data" -l "$pg_dir/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $port -k $pg_dir -c max_connections=400 -c fsync=on -c synchronous_commit=on" \
    start >/dev/null || { cat "$pg_dir/server.log" >&2; die "PostgreSQL did not start"; }
  trap stop_throwaway_postgres EXIT
  export DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres"
}

if [ -n "${DATABASE_URL:-}" ]; then
  case "$DATABASE_URL" in
    postgres://*|postgresql://*) step "using PostgreSQL from DATABASE_URL" ;;
    *) die "DATABASE_URL must be a postgres:// URL for the tests (SQLite tests need none)" ;;
  esac
else
  start_throwaway_postgres
fi

step "JavaScript: npm ci, the client packages, Vitest, the web UI (embedded into the binary) and the AI SDK example"
NPM_TEST=1 bash scripts/build-web-ui.sh

step "MCP servers from npm for the MCP client tests (tests/fixtures/mcp-servers, npm ci from its lockfile)"
if ! cmp -s tests/fixtures/mcp-servers/package-lock.json tests/fixtures/mcp-servers/node_modules/.stead-lock 2>/dev/null; then
  (cd tests/fixtures/mcp-servers && npm ci --no-audit --no-fund --loglevel=error && cp package-lock.json node_modules/.stead-lock)
fi

step "An OpenID Connect provider from npm for the web UI's sign-in test (tests/fixtures/oidc-provider, npm ci from its lockfile)"
if ! cmp -s tests/fixtures/oidc-provider/package-lock.json tests/fixtures/oidc-provider/node_modules/.stead-lock 2>/dev/null; then
  (cd tests/fixtures/oidc-provider && npm ci --no-audit --no-fund --loglevel=error && cp package-lock.json node_modules/.stead-lock)
fi

step "Chromium for the browser tests (Debian's package; no browser download)"
if [ -z "${CHROMIUM:-}" ]; then
  if [ ! -x /usr/bin/chromium ]; then
    if [ "$(id -u)" = 0 ]; then
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    else
      die "Chromium is needed for the browser tests: sudo apt-get install chromium (or set CHROMIUM=/path/to/chromium)"
    fi
  fi
  export CHROMIUM=/usr/bin/chromium
fi

step "stead setup (ONNX Runtime, the default model, the embedding and speech models, SmolLM2 for the quick tests and Gemma 3 at fp32 for the converter check, cached under the target dir)"
source scripts/ensure-python-venv.sh
source scripts/ensure-cxx.sh
cargo build --locked --bin stead
export STEAD_DATA_DIR="$CARGO_TARGET_DIR/stead-data"
"$CARGO_TARGET_DIR/debug/stead" setup --data-dir "$STEAD_DATA_DIR"
"$CARGO_TARGET_DIR/debug/stead" setup --data-dir "$STEAD_DATA_DIR" --model smollm2-135m-instruct
"$CARGO_TARGET_DIR/debug/stead" setup --data-dir "$STEAD_DATA_DIR" --model gemma3-270m --precision fp32

step "Schemathesis (PyPI) for the API property tests, cached under the target dir"
schemathesis_venv="$CARGO_TARGET_DIR/schemathesis-venv"
schemathesis_version="4.32.5"
if [ "$("$schemathesis_venv/bin/schemathesis" --version 2>/dev/null || true)" != "schemathesis, version $schemathesis_version" ]; then
  rm -rf "$schemathesis_venv"
  python3 -m venv "$schemathesis_venv"
  "$schemathesis_venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$schemathesis_version"
fi
export SCHEMATHESIS_BIN="$schemathesis_venv/bin/schemathesis"

step "The official openai and anthropic Python clients (PyPI) and Stead's own (clients/python), for the client tests"
clients_venv="$CARGO_TARGET_DIR/pyclients-venv"
openai_version="3.57.0"
anthropic_version="2.17.0"
if [ "$("$clients_venv/bin/python" -c 'import openai, anthropic; print(openai.__version__, anthropic.__version__)' 2>/dev/null || true)" != "$openai_version $anthropic_version" ]; then
  rm -rf "$clients_venv"
  python3 -m venv "$clients_venv"
  "$clients_venv/bin/pip" install --quiet --disable-pip-version-check "openai==$openai_version" "anthropic==$anthropic_version"
fi
# Installed like a user would (pip install ./clients/python), again each run: it is this tree's.
"$clients_venv/bin/pip" install --quiet --disable-pip-version-check --no-deps --force-reinstall ./clients/python
rm -rf clients/python/build clients/python/stead.egg-info
export OPENAI_PYTHON="$clients_venv/bin/python"
export CLIENT_PYTHON="$clients_venv/bin/python"

step "Node 18 (what Debian 12 ships; PyPI's nodejs-bin), for @stead/client's test on the oldest Node it supports"
node18_venv="$CARGO_TARGET_DIR/node18-venv"
if [ ! -x "$node18_venv/node" ]; then
  rm -rf "$node18_venv"
  python3 -m venv "$node18_venv"
  "$node18_venv/bin/pip" install --quiet --disable-pip-version-check "nodejs-bin==18.4.0a4"
  ln -s "$("$node18_venv/bin/python" -c 'import nodejs, os; print(os.path.join(os.path.dirname(nodejs.__file__), "bin", "node"))')" "$node18_venv/node"
fi
export NODE18="$node18_venv/node"

step "The official MCP Python SDK (PyPI), for the Streamable HTTP server and /mcp client tests"
mcp_venv="$CARGO_TARGET_DIR/mcp-venv"
mcp_version="2.3.0"
if [ "$("$mcp_venv/bin/python" -c 'import importlib.metadata as m; print(m.version("mcp"))' 2>/dev/null || true)" != "$mcp_version" ]; then
  rm -rf "$mcp_venv"
  python3 -m venv "$mcp_venv"
  "$mcp_venv/bin/pip" install --quiet --disable-pip-version-check "mcp==$mcp_version"
fi
export MCP_PYTHON="$mcp_venv/bin/python"

step "An S3-compatible server (moto's, PyPI), for the artifact store's S3 tests"
s3_venv="$CARGO_TARGET_DIR/s3-venv"
moto_version="5.2.6"
if [ "$("$s3_venv/bin/python" -c 'import importlib.metadata as m; print(m.version("moto"))' 2>/dev/null || true)" != "$moto_version" ]; then
  rm -rf "$s3_venv"
  python3 -m venv "$s3_venv"
  "$s3_venv/bin/pip" install --quiet --disable-pip-version-check "moto[server]==$moto_version"
fi
export MOTO_SERVER="$s3_venv/bin/moto_server"

step "llama.cpp (llama-cpp-python, built from source once; pip caches the wheel), for the converter check"
llama_venv="$CARGO_TARGET_DIR/llama-venv"
# (g++ is there: ensure-cxx.sh installed it before the first cargo build.)
if ! cmp -s inference/setup/llama-requirements.txt "$llama_venv/requirements.txt" 2>/dev/null; then
  rm -rf "$llama_venv"
  python3 -m venv "$llama_venv"
  # Portable AVX2 build: the native one (AVX-512/AMX detected) crashes on some EPYC machines.
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_OPENMP=OFF" \
    "$llama_venv/bin/pip" install --quiet --disable-pip-version-check --no-deps -r inference/setup/llama-requirements.txt
  cp inference/setup/llama-requirements.txt "$llama_venv/requirements.txt"
fi
export LLAMA_PYTHON="$llama_venv/bin/python"

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (all targets, warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cargo test (SQLite and PostgreSQL)"
test_log="$CARGO_TARGET_DIR/test-output.log"
cargo test --workspace --locked 2>&1 | tee "$test_log"
status=${PIPESTATUS[0]}
# One closing line over every test binary: cargo's own last line is the last crate's doc-tests.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($i ~ /^passed;?$/) p += $(i-1); if ($i ~ /^failed;?$/) f += $(i-1); if ($i ~ /^ignored;?$/) s += $(i-1) } }
     END { printf "\ntests: %d passed, %d failed, %d skipped\n", p, f, s }' "$test_log"
exit "$status"
