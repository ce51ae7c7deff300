#!/usr/bin/env bash
# The GPU check for a lent H200 (no compiler toolchain for us there: no gRPC, protobuf,
# Gloo, OpenBLAS; its python3 venv has torch, jax[cuda], flax, optax and the NVIDIA
# libraries). Two halves:
#
#   bench/gpu/check.sh pack   here: build for sm_90 in build-cuda, bundle the binaries with
#                             every non-system library they need and the Fashion-MNIST
#                             files into .bundle/lockstep-gpu.tar.xz (ignored, < 64 MiB)
#   bench/gpu/check.sh run    there, from the repo root (device tool: carry [".bundle"],
#                             timeout_s 540): the CUDA tests, a real job through the
#                             coordinator with one GPU worker (the CNN recipe), then the
#                             benchmark against JAX and PyTorch; a table is printed last.
#                             Logs and the table go to $OUT (or /tmp/gpu_check).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${LOCKSTEP_GPU_BUILD:-$root/build-cuda}
bundle=$root/.bundle/lockstep-gpu.tar.xz
bins="lockstep lockstep-coordinator lockstep-worker job_bench"
tests="backend_factory_test cuda_backend_test cuda_step_test nccl_collective_test golden_test"

pack() {
  set -e
  if [ ! -f "$build/build.ninja" ]; then
    cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90
  fi
  ninja -C "$build" -j "${LOCKSTEP_JOBS:-2}" $bins $tests
  local stage=$root/.bundle/stage
  rm -rf "$stage" && mkdir -p "$stage/bin" "$stage/lib" "$stage/fallback" "$stage/data/fashion-mnist"
  for b in $bins $tests; do
    local path
    path=$(find "$build" -name "$b" -type f -executable | head -1)
    cp "$path" "$stage/bin/"
    # Every resolved dependency but glibc's and CUDA's (the GPU machine has those).
    ldd "$path" | awk '/=> \// {print $3}' |
      grep -vE '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libcuda|libcublas|libcublasLt|libnccl)\.so' |
      xargs -r cp -Lu -t "$stage/lib/"
  done
  # That machine's C++ runtime is newer; ours is a fallback only.
  mv "$stage"/lib/libstdc++.so.6 "$stage"/lib/libgcc_s.so.1 "$stage/fallback/" 2>/dev/null || true
  cp /usr/share/datasets/fashion-mnist/*.gz "$stage/data/fashion-mnist/"
  tar -C "$root/.bundle" -cJf "$bundle" stage
  rm -rf "$stage"
  ls -la "$bundle"
}

# Directories holding cuBLAS and NCCL on that machine: the python venv's NVIDIA wheels
# first, then the usual places.
nvidia_lib_path() {
  local site dirs=""
  site=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
  for lib in libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
    local d
    d=$(find $site /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu \
        -name "$lib" 2>/dev/null | head -1 | xargs -r dirname)
    echo "  $lib: ${d:-NOT FOUND}" >&2
    [ -n "$d" ] && dirs="$dirs:$d"
  done
  echo "${dirs#:}"
}

run() {
  local out=${OUT:-/tmp/gpu_check}
  # LOCKSTEP_CHECK_DEVICE=cpu LOCKSTEP_CHECK_QUICK=1 dry-runs the whole script, shortened,
  # on a machine without a GPU.
  local device=${LOCKSTEP_CHECK_DEVICE:-cuda:0} quick=${LOCKSTEP_CHECK_QUICK:-0}
  local epochs=5 configs="cnn 128 3000 200,cnn 1024 600 50,mlp 4096 1000 100" peer_args=""
  if [ "$quick" = 1 ]; then
    epochs=1 configs="cnn 128 60 10,cnn 1024 12 2,mlp 4096 20 5" peer_args="--quick --no-compile"
  fi
  mkdir -p "$out"
  exec > >(tee "$out/check.log") 2>&1
  local t0=$SECONDS tmp
  tmp=$(mktemp -d)
  tar -C "$tmp" -xJf "$bundle" || { echo "no bundle at $bundle: run 'pack' first"; exit 1; }
  local s=$tmp/stage
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  echo "libraries:"
  export LD_LIBRARY_PATH="$s/lib:$(nvidia_lib_path)"
  if ! "$s/bin/lockstep" help >/dev/null 2>&1; then
    echo "this machine's C++ runtime is too old for the bundle: using the bundled one"
    export LD_LIBRARY_PATH="$s/fallback:$LD_LIBRARY_PATH"
  fi
  export LOCKSTEP_SOURCE_DIR=$root NCCL_SOCKET_IFNAME=lo NCCL_DEBUG=WARN
  local failed=0

  echo; echo "=== 1. CUDA tests (every kernel vs its CPU reference, the step vs the CPU step, graphs, NCCL with one rank)"
  for t in $tests; do
    timeout 90 "$s/bin/$t" >"$out/$t.log" 2>&1
    local rc=$?
    echo "$t: exit $rc; $(grep -E '^\[  (PASSED|FAILED) +\] [0-9]|^\[  SKIPPED \] [0-9]' "$out/$t.log" | tr '\n' ' ')"
    grep -E "Failure|Which is|Expected|error:" "$out/$t.log" | head -20
    grep -m1 "no usable GPU" "$out/$t.log" && failed=1
    [ "$rc" -ne 0 ] && failed=1
  done
  echo "(tests took $((SECONDS - t0)) s)"

  echo; echo "=== 2. A job through the coordinator with one GPU worker: the CNN recipe, 5 epochs"
  local state=$tmp/state
  "$s/bin/lockstep-coordinator" --listen=127.0.0.1:0 --port_file="$tmp/port" --state_dir="$state" \
    >"$out/coordinator.log" 2>&1 &
  local coord=$!
  for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.1; done
  local addr=127.0.0.1:$(cat "$tmp/port")
  export LOCKSTEP_COORDINATOR=$addr
  "$s/bin/lockstep-worker" --coordinator="$addr" --listen=127.0.0.1:0 --advertise_host=127.0.0.1 \
    --device="$device" --threads=4 >"$out/worker.log" 2>&1 &
  local worker=$!
  for _ in $(seq 200); do "$s/bin/lockstep" workers | grep -q "${device%%:*}" && break; sleep 0.1; done
  if ! "$s/bin/lockstep" workers | grep -q "${device%%:*}"; then
    echo "the GPU worker did not register:"; tail -20 "$out/worker.log"
    kill "$coord"; exit 1
  fi
  "$s/bin/lockstep" workers
  cat >"$tmp/cnn-gpu.yaml" <<YAML
name: flax-mnist-cnn-gpu   # examples/cnn.yaml on one GPU worker
model: {kind: cnn}
optimizer: {kind: sgd, learning_rate: 0.1, momentum: 0.9}
dataset: {name: fashion_mnist, path: $s/data/fashion-mnist}
global_batch_size: 128
epochs: $epochs
seed: 0
workers: 1
device: ${device%%:*}
YAML
  local t1=$SECONDS
  timeout 240 "$s/bin/lockstep" submit "$tmp/cnn-gpu.yaml" --wait 2>&1 | tr '\r' '\n' | grep -vE '^\[ *[0-9]+%\]|^$' | tail -12
  "$s/bin/lockstep" list --json >"$out/job.json"
  local acc
  acc=$(python3 -c "import json; j=json.load(open('$out/job.json'))['jobs'][0]; print(j.get('last_eval',{}).get('test_accuracy',0), j['state'])")
  echo "CNN recipe on the GPU worker: test accuracy and state: $acc ($((SECONDS - t1)) s)"
  [ "$quick" = 1 ] || python3 -c "import sys; sys.exit(0 if float('$acc'.split()[0]) >= 0.90 else 1)" || failed=1

  echo; echo "=== 3. Benchmark: Lockstep through the coordinator (one GPU worker, graphs on, TF32 off)"
  : >"$out/bench.jsonl"
  local IFS_=$IFS
  IFS=,
  for cfg in $configs; do
    IFS=$IFS_
    set -- $cfg
    timeout 120 "$s/bin/job_bench" --coordinator "$addr" --model "$1" --batch "$2" --steps "$3" \
      --warmup "$4" --device "${device%%:*}" | tee -a "$out/bench.jsonl"
  done
  kill "$worker" "$coord" 2>/dev/null; wait "$worker" "$coord" 2>/dev/null
  echo; echo "=== 4. Peers on the same GPU: JAX (the seed's pmap step, jit) and PyTorch (eager, compile)"
  unset LD_LIBRARY_PATH
  timeout 300 python3 "$root/bench/gpu/peers.py" --device "${device%%:*}" $peer_args 2>"$out/peers.err" | tee -a "$out/bench.jsonl"
  tail -5 "$out/peers.err"

  echo; echo "=== Table (total $((SECONDS - t0)) s)"
  python3 "$root/bench/gpu/table.py" "$out/bench.jsonl" | tee "$out/table.md"
  exit $failed
}

case "${1:-}" in
  pack) pack ;;
  run) run ;;
  *) echo "usage: $0 pack|run" >&2; exit 2 ;;
esac
