#!/usr/bin/env bash
# The CUDA tests on a GPU machine that cannot build Lockstep (no abseil, protobuf,
# OpenBLAS, GoogleTest there): `pack` here builds the CUDA test binaries and bundles them
# with the shared libraries they need, except the CUDA ones (cuBLAS, NCCL, the driver),
# which the GPU machine has; `run` there unpacks the bundle and runs the tests.
#
#   workers/cuda/gpu_check.sh pack [BUILD_DIR]   # here; writes BUILD_DIR/gpu_check.tar.xz
#   workers/cuda/gpu_check.sh run [BUILD_DIR]    # on the GPU machine, in the repo root;
#                                                # logs to $OUT (or /tmp/gpu_check_logs)
# BUILD_DIR defaults to build-cuda (configured for Hopper, sm_90, when missing). With the
# device tool: carry ["build-cuda/gpu_check.tar.xz"], command
# "workers/cuda/gpu_check.sh run", timeout_s about 420 (the tests take well under that).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
mode=${1:-}
build=${2:-build-cuda}
case "$build" in /*) ;; *) build="$root/$build" ;; esac
tests="backend_factory_test cuda_backend_test nccl_collective_test cuda_step_test"

pack() {
  set -e
  if [ ! -f "$build/build.ninja" ]; then
    cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90
  fi
  ninja -C "$build" $tests
  local stage="$build/gpu_check"
  rm -rf "$stage" && mkdir -p "$stage/bin" "$stage/lib" "$stage/fallback"
  for t in $tests; do
    local bin
    bin=$(find "$build/workers" -name "$t" -type f -executable | head -1)
    cp "$bin" "$stage/bin/"
    # Every resolved dependency except glibc's and CUDA's own (the GPU machine has those).
    ldd "$bin" | awk '/=> \// {print $3}' |
      grep -vE '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libcuda|libcublas|libcublasLt|libnccl)\.so' |
      xargs -r cp -Lu -t "$stage/lib/"
  done
  # The C++ runtime: the GPU machine's own is used unless it is too old for these builds.
  mv "$stage"/lib/libstdc++.so.6 "$stage"/lib/libgcc_s.so.1 "$stage/fallback/"
  tar -C "$build" -cJf "$build/gpu_check.tar.xz" gpu_check
  ls -la "$build/gpu_check.tar.xz"
}

# The first directory under the usual places holding library $1.
find_lib_dir() {
  find /usr/local/cuda/lib64/ /usr/local/cuda/ /usr/lib/x86_64-linux-gnu/ /opt/ /usr/local/lib/ \
    -name "$1" 2>/dev/null | head -1 | xargs -r dirname
}

run() {
  local out=${OUT:-/tmp/gpu_check_logs}
  mkdir -p "$out"
  local tmp
  tmp=$(mktemp -d)
  tar -C "$tmp" -xJf "$build/gpu_check.tar.xz" || { echo "no bundle at $build"; exit 1; }
  local path="$tmp/gpu_check/lib"
  for lib in libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
    local dir
    dir=$(find_lib_dir "$lib")
    echo "$lib: ${dir:-NOT FOUND}"
    [ -n "$dir" ] && path="$path:$dir"
  done
  export LD_LIBRARY_PATH="$path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  if ! "$tmp/gpu_check/bin/backend_factory_test" --gtest_list_tests >/dev/null 2>&1; then
    echo "this machine's C++ runtime is too old for the bundle: using the bundled one"
    export LD_LIBRARY_PATH="$tmp/gpu_check/fallback:$LD_LIBRARY_PATH"
  fi
  # One process, one GPU: NCCL needs no network, so it bootstraps over loopback.
  export LOCKSTEP_SOURCE_DIR="$root" NCCL_DEBUG=${NCCL_DEBUG:-WARN} NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
  local failed=0 gpu=0
  nvidia-smi -L 2>&1 && gpu=1
  for t in $tests; do
    local bin="$tmp/gpu_check/bin/$t"
    ldd "$bin" | grep "not found" && failed=1
    echo "=== $t"
    timeout 240 "$bin" 2>&1 | tee "$out/$t.log" |
      grep -E "^\[  (FAILED|PASSED) |^\[  SKIPPED \] [0-9]|Failure|Which is|actual|Expected|error" |
      head -80
    local rc=${PIPESTATUS[0]}
    # Why tests skipped, if they did: on a machine with a GPU that is a failure.
    grep -m1 "no usable GPU" "$out/$t.log" && [ "$gpu" -eq 1 ] && failed=1
    echo "=== $t exit $rc"
    [ "$rc" -ne 0 ] && failed=1
  done
  exit $failed
}

case "$mode" in
  pack) pack ;;
  run) run ;;
  *) echo "usage: $0 pack|run [BUILD_DIR]" >&2; exit 2 ;;
esac
