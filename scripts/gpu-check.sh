#!/usr/bin/env bash
# The CUDA path, for a machine with an NVIDIA GPU and driver (none on the project's CI machine):
# builds Stead with `--features cuda`, prepares the model (`stead setup`) and a CUDA runtime from
# PyPI — onnxruntime-gpu 1.31.1 (built for CUDA 13) and NVIDIA's CUDA 13 library wheels — then
# runs the engine's model tests and `stead bench inference` on CUDA.
#
#   scripts/gpu-check.sh            # everything under $CARGO_TARGET_DIR/stead-gpu-data
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
data="${STEAD_GPU_DATA_DIR:-$CARGO_TARGET_DIR/stead-gpu-data}"
step() { printf '\n==> %s\n' "$*" >&2; }

step "GPU"
command -v nvidia-smi >/dev/null && nvidia-smi -L || { echo "error: no NVIDIA GPU/driver visible (nvidia-smi)" >&2; exit 1; }

step "build with --features cuda"
source scripts/ensure-cxx.sh
cargo build --release --locked --features cuda --bin stead
stead="$CARGO_TARGET_DIR/release/stead"

step "stead setup (model and CPU runtime)"
"$stead" setup --data-dir "$data"

step "CUDA runtime from PyPI"
venv="$data/setup/gpu-venv"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install --disable-pip-version-check -q --no-deps \
  onnxruntime-gpu==1.31.1 \
  'nvidia-cuda-runtime>=13,<14' 'nvidia-cublas>=13,<14' 'nvidia-curand>=10,<11' \
  'nvidia-cuda-nvrtc>=13,<14' 'nvidia-cufft>=12,<13'
site=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
runtime="$data/runtime-cuda"
mkdir -p "$runtime"
# Keep libonnxruntime.so and its provider libraries in one folder: ONNX Runtime loads the CUDA
# provider from beside itself.
cp "$site"/onnxruntime/capi/libonnxruntime.so.1* "$runtime/libonnxruntime.so"
cp "$site"/onnxruntime/capi/libonnxruntime_providers_*.so "$runtime/"
cuda_libs=$(find "$site/nvidia" -type d -name lib | tr '\n' ':')
export LD_LIBRARY_PATH="${cuda_libs}${LD_LIBRARY_PATH:-}"

step "engine tests on CUDA"
STEAD_DATA_DIR="$data" INFERENCE_TEST_PROVIDER=cuda INFERENCE_TEST_RUNTIME="$runtime/libonnxruntime.so" \
  cargo test --release --locked --features cuda -p stead-inference --test local_model

step "stead bench inference on CUDA"
"$stead" --data-dir "$data" bench inference --execution-provider cuda \
  --runtime-library "$runtime/libonnxruntime.so" --no-peer
