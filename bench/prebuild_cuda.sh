#!/usr/bin/env bash
# Builds the CUDA library (sm_90) and the C GPU-versus-CPU program here, on
# the machine without a GPU, and copies them to .prebuilt/ for a device run:
#   bash bench/prebuild_cuda.sh
#   run(carry=[".whl", ".prebuilt"]):
#     GPU_CHECK_PREBUILT=.prebuilt bash bench/gpu_check.sh
# The device then skips its ~160 s build.  The library needs only libc,
# libstdc++ and the CUDA driver there (the runtime is linked statically).
set -euo pipefail
cd "$(dirname "$0")/.."
build=build/cuda90real
out=.prebuilt
cmake -S . -B "$build" -G Ninja -DMIOPEN_BN_GPU=CUDA -DMIOPEN_BN_GPU_ARCHS=90-real -DMIOPEN_BN_BUILD_TESTS=ON >/dev/null
cmake --build "$build" -j "$(nproc)"
rm -rf "$out" && mkdir -p "$out"
# The library once (a carry holds 64 MiB), its other names as relative links.
library=$(readlink -f "$build/libmiopen_bn.so")
cp "$library" "$out/"
for name in $(cd "$build" && ls libmiopen_bn.so*); do
    [ "$name" = "$(basename "$library")" ] || ln -s "$(basename "$library")" "$out/$name"
done
cp "$build/miopen_bn_gpu_vs_cpu" "$out/"
printf '%s%s, built %s\n' "$(git rev-parse --short HEAD)" \
    "$(git diff --quiet HEAD -- native include CMakeLists.txt cmake tests/c || echo ' + uncommitted changes')" \
    "$(date -u '+%F %T UTC')" > "$out/BUILT_FROM"
ls -la "$out"; cat "$out/BUILT_FROM"
