#!/usr/bin/env bash
# One device run of miopen-bn on an NVIDIA GPU, from the repository root:
#   1. the machine: GPU, python, torch, nvcc, cmake
#   2. build + install the package with the CUDA backend (sm_90) into /tmp/mbn
#   3. the GPU tests: python -m pytest -m gpu -q tests/, then the C program
#      tests/c/gpu_vs_cpu.cpp (every entry point, GPU handle against CPU
#      handle, plus one float16 call on more than 2^31 elements)
#   3c. compute-sanitizer memcheck and racecheck on that C program, on a
#      subset of its cases (GPU_CHECK_SANITIZER_FILTER, default one small
#      shape through every op, type and layout), then on the group-norm GPU
#      tests (GPU_CHECK_SANITIZER_S seconds per tool and target, default
#      150); summary lines "sanitizer-memcheck: ERROR SUMMARY: 0 errors",
#      "sanitizer-racecheck: RACECHECK SUMMARY: ..." and sanitizer-gn-*
#   4. the bench: python bench/bench.py --backend gpu, under a time cap
# Every step says what it runs and how long it took; logs go to $OUT
# (gpu_check.log = everything; build.log, pytest.log, bench.log; the bench's
# <device>.json, <device>.md and roofline_<device>.png).
#
# Needs the cffi and pycparser wheels in .whl/ (carry ".whl"): the device
# has no network and no cffi.  Whole run capped near GPU_CHECK_BUDGET_S
# seconds (default 520).
# GPU_CHECK_BENCH_RESERVE_S (default 200) is the time the tests leave the bench.
# GPU_CHECK_PROFILE_CASES="gn_fwd:2x320x64x64:fp32:nchw ..." adds an ncu step.
# GPU_CHECK_BENCH_ARGS adds bench arguments (say "--ops gn_fwd,gn_bwd").  The
# bench compiles every row for its torch.compile anchor (worker processes
# first, before timing: bench/bench_precompile.py), so the whole bench no
# longer fits one call: run it in parts, one per call (say "--ops
# bn_infer,bn_train", "--ops bn_bwd", "--ops gn_fwd,gn_fwd_swish,gn_bwd"),
# and read them together with bench/targets.py PART1.json PART2.json ...;
# "--no-compiled" gives the old, compile-free bench.
# GPU_CHECK_AB="base:MIOPEN_BN_LIBRARY=.ab/base/libmiopen_bn.so new: ..." adds an
# A/B step: the bench on GPU_CHECK_AB_ARGS (say "--shapes 32x256x56x56 --ops
# bn_train"), once per variant NAME:VAR=VALUE,VAR=VALUE (the settings apply to
# that run alone; none: this build as it is), each in its own process, then
# bench/ab_compare.py over their JSONs (ab_NAME.json, ab_compare.txt).
# GPU_CHECK_SKIP="pytest c_check driver sanitizer" leaves those steps out (say,
# a bench-only run after the tests passed in an earlier one); the time the
# skipped steps would have had goes to the others.
# GPU_CHECK_PREBUILT=.prebuilt uses a library built here by
# bench/prebuild_cuda.sh (carry ".prebuilt") instead of building on the device.
# Local dry run without a GPU: GPU_CHECK_SIMULATE=1 bash bench/gpu_check.sh
# (CPU-only build, GPU tests must skip, a quick CPU bench); add
# GPU_CHECK_FORCE_CMAKE=1 to exercise the plain-CMake fallback build.
set -euo pipefail

OUT="${OUT:-$PWD/build/gpu_check_out}"
mkdir -p "$OUT"
BUDGET_S="${GPU_CHECK_BUDGET_S:-520}"
PYTEST_S="${GPU_CHECK_PYTEST_S:-300}"
SANITIZER_S="${GPU_CHECK_SANITIZER_S:-150}"
SANITIZER_FILTER="${GPU_CHECK_SANITIZER_FILTER:-4x16x9x11}"
SIMULATE="${GPU_CHECK_SIMULATE:-0}"
SKIP=" ${GPU_CHECK_SKIP:-} "
SITE=/tmp/site        # carried wheels
TARGET=/tmp/mbn       # the built package
PYTHON="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1
export PYTHONDONTWRITEBYTECODE=1
export PYTHONPATH="${PYTHONPATH:-}"

declare -a SUMMARY=()

banner() { printf '\n===== [%4ds] %s\n' "$SECONDS" "$*"; }
note() { printf '+ %s\n' "$*"; }
record() { SUMMARY+=("$(printf '%-10s rc=%-3s %4ds  %s' "$1" "$2" "$3" "$4")"); }

# run_logged NAME LOGFILE CMD...: runs CMD with its output in LOGFILE and on
# the console; sets RC to its exit status (never stops the script).
run_logged() {
    local name=$1 log=$2 start=$SECONDS
    shift 2
    note "$*"
    set +e
    "$@" 2>&1 | tee -a "$log"
    RC=${PIPESTATUS[0]}
    set -e
    printf -- '----- %s: rc=%s after %ds\n' "$name" "$RC" "$((SECONDS - start))"
}

step_machine() {
    banner "1. machine"
    local start=$SECONDS
    if command -v nvidia-smi >/dev/null; then
        note "nvidia-smi -L"; nvidia-smi -L || true
        note "nvidia-smi --query-gpu=..."
        nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu \
            --format=csv || true
    else
        note "nvidia-smi: not found"
    fi
    note "$PYTHON --version"; "$PYTHON" --version
    note "torch / CUDA / cuDNN"
    "$PYTHON" - <<'EOF' || true
import torch
print("torch", torch.__version__, "CUDA", torch.version.cuda, "cuDNN",
      torch.backends.cudnn.version(), "cuda available", torch.cuda.is_available())
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print("device", torch.cuda.get_device_name(0), "SMs", p.multi_processor_count,
          "L2 MiB", getattr(p, "L2_cache_size", 0) >> 20, "GiB", round(p.total_memory / 2**30))
EOF
    if command -v nvcc >/dev/null; then note "nvcc --version"; nvcc --version | tail -n 2 || true; else note "nvcc: not found"; fi
    note "cmake --version"; cmake --version | head -n 1 || true
    note "ninja --version"; ninja --version || true
    note "pip versions"
    "$PYTHON" -m pip --version || true
    "$PYTHON" - <<'EOF' || true
import importlib.metadata as md
for name in ("scikit-build-core", "numpy", "ml-dtypes", "pytest", "hypothesis", "matplotlib", "cffi"):
    try:
        print(f"  {name} {md.version(name)}")
    except md.PackageNotFoundError:
        print(f"  {name}: not installed")
EOF
    record machine 0 $((SECONDS - start)) "machine described"
}

step_wheels() {
    banner "1b. cffi + pycparser from the carried wheels"
    local start=$SECONDS
    if "$PYTHON" -c "import cffi, pycparser" 2>/dev/null; then
        note "cffi already importable: the carried wheels are not needed"
    elif ls .whl/*.whl >/dev/null 2>&1; then
        note "pip install --no-index --no-deps --target $SITE .whl/*.whl"
        "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target "$SITE" .whl/*.whl
        export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
    else
        note "no .whl/ here (was it named in carry?); relying on an installed cffi"
    fi
    if "$PYTHON" -c "import cffi, pycparser; print('cffi', cffi.__version__, 'pycparser', pycparser.__version__)"; then
        record wheels 0 $((SECONDS - start)) "cffi importable"
    else
        record wheels 1 $((SECONDS - start)) "cffi NOT importable: the bindings cannot load"
        return 1
    fi
}

# If the built library needs shared libraries the loader cannot find (say
# libcudart.so.13 outside ld.so.conf), look for them in the CUDA toolkit and
# in the pip-installed NVIDIA runtime, and add their folders to
# LD_LIBRARY_PATH.
fix_missing_libs() {
    local lib=$1 missing name dir
    [ -n "$lib" ] && [ -e "$lib" ] || { note "no library file to check with ldd"; return 0; }
    missing=$(ldd "$lib" 2>/dev/null | awk '/not found/ {print $1}')
    [ -z "$missing" ] && { note "ldd: every dependency of $(basename "$lib") resolves"; return 0; }
    note "ldd: not found: $(echo $missing)"
    local candidates=(/usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib)
    if command -v nvcc >/dev/null; then
        candidates+=("$(dirname "$(command -v nvcc)")/../lib64" "$(dirname "$(command -v nvcc)")/../lib")
    fi
    candidates+=($("$PYTHON" -c 'import glob, os, site
for root in site.getsitepackages():
    for path in glob.glob(os.path.join(root, "nvidia", "*", "lib")): print(path)' 2>/dev/null))
    for name in $missing; do
        for dir in "${candidates[@]}"; do
            if [ -e "$dir/$name" ]; then
                note "found $name in $dir: adding it to LD_LIBRARY_PATH"
                export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
                break
            fi
        done
    done
    if ldd "$lib" | grep "not found"; then note "still missing (the import check will say more)"; fi
}

step_build() {
    banner "2. build the package with the CUDA backend (sm_90) into $TARGET"
    local start=$SECONDS gpu=CUDA
    [ "$SIMULATE" = 1 ] && gpu=OFF
    export CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)"
    rm -rf "$TARGET"
    if [ -n "${GPU_CHECK_PREBUILT:-}" ] && [ "$SIMULATE" != 1 ]; then
        use_prebuilt "$start"
        return
    fi
    if [ "${GPU_CHECK_FORCE_CMAKE:-0}" = 1 ]; then
        note "GPU_CHECK_FORCE_CMAKE=1: skipping the pip build (tests the fallback)"
        RC=1
    else
        run_logged build "$OUT/build.log" "$PYTHON" -m pip install -v --no-build-isolation \
            --no-deps --no-index --no-cache-dir --target "$TARGET" \
            -Cbuild-dir=build/gpu_check -Ccmake.define.MIOPEN_BN_BUILD_TESTS=ON \
            -Ccmake.define.MIOPEN_BN_GPU=$gpu -Ccmake.define.MIOPEN_BN_GPU_ARCHS=90 .
    fi
    if [ "$RC" = 0 ]; then
        export PYTHONPATH="$TARGET${PYTHONPATH:+:$PYTHONPATH}"
        C_CHECK=build/gpu_check/miopen_bn_gpu_vs_cpu
        BUILD_HOW="pip --target $TARGET"
    else
        note "pip build failed (last lines above; whole log in build.log); trying plain CMake"
        run_logged cmake "$OUT/build.log" bash -c \
            "cmake -S . -B build/gpu_cmake -G Ninja -DMIOPEN_BN_GPU=$gpu -DMIOPEN_BN_GPU_ARCHS=90 \
             && cmake --build build/gpu_cmake -j $(nproc)"
        if [ "$RC" != 0 ]; then
            record build "$RC" $((SECONDS - start)) "BUILD FAILED (pip and CMake): see build.log"
            return 1
        fi
        export MIOPEN_BN_LIBRARY="$PWD/build/gpu_cmake/libmiopen_bn.so"
        C_CHECK=build/gpu_cmake/miopen_bn_gpu_vs_cpu
        export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
        BUILD_HOW="CMake build/gpu_cmake + MIOPEN_BN_LIBRARY, package from python/"
    fi
    import_check "$start"
}

# A library and C program built elsewhere for sm_90 (bench/prebuild_cuda.sh),
# carried in $GPU_CHECK_PREBUILT: saves the device the ~160 s build.  The
# package is the source tree's python/ with MIOPEN_BN_LIBRARY naming it.
use_prebuilt() {
    local start=$1 dir="$PWD/$GPU_CHECK_PREBUILT"
    note "prebuilt: $(cat "$dir/BUILT_FROM" 2>/dev/null || echo 'no BUILT_FROM')"
    if [ ! -f "$dir/libmiopen_bn.so" ]; then
        record build 1 $((SECONDS - start)) "no $GPU_CHECK_PREBUILT/libmiopen_bn.so (carried?)"
        return 1
    fi
    export MIOPEN_BN_LIBRARY="$dir/libmiopen_bn.so"
    export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
    export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"  # the C program's soname
    C_CHECK="$dir/miopen_bn_gpu_vs_cpu"
    chmod +x "$C_CHECK" 2>/dev/null || true
    BUILD_HOW="prebuilt $GPU_CHECK_PREBUILT + MIOPEN_BN_LIBRARY, package from python/"
    import_check "$start"
}

import_check() {
    local start=$1
    fix_missing_libs "$(ls "$TARGET"/miopen_bn/libmiopen_bn.so "${MIOPEN_BN_LIBRARY:-/nonexistent}" 2>/dev/null | head -n 1)"
    note "import check (from /tmp, so the source tree cannot shadow the install)"
    if (cd /tmp && "$PYTHON" - <<'EOF'
import miopen_bn
print("miopen_bn", getattr(miopen_bn, "__version__", "?"), "from", miopen_bn.__file__)
print("GPU support compiled in:", bool(miopen_bn.lib.miopenBNHasGpuSupport()))
EOF
    ); then
        record build 0 $((SECONDS - start)) "$BUILD_HOW"
    else
        record build 1 $((SECONDS - start)) "built, but 'import miopen_bn' failed ($BUILD_HOW)"
        return 1
    fi
}

# Seconds to keep for the steps after pytest that will run.
later_steps_reserve() {
    local reserve=0
    [[ "$SKIP" == *" sanitizer "* ]] || reserve=$(( reserve + 4 * SANITIZER_S + 20 ))
    [[ "$SKIP" == *" bench "* ]] || reserve=$(( reserve + ${GPU_CHECK_BENCH_RESERVE_S:-200} ))
    echo "$reserve"
}

step_pytest() {
    banner "3. GPU tests"
    local start=$SECONDS cap extra=()
    cap=$(( BUDGET_S - SECONDS - $(later_steps_reserve) ))
    [ "$cap" -gt "$PYTEST_S" ] && cap=$PYTEST_S
    [ "$cap" -lt 60 ] && cap=60
    if "$PYTHON" -c "import pytest_timeout" 2>/dev/null; then extra+=(--timeout=120); fi
    note "time cap ${cap}s"
    run_logged pytest "$OUT/pytest.log" timeout -k 10 "$cap" "$PYTHON" -m pytest -m gpu -q \
        -p no:cacheprovider --continue-on-collection-errors "${extra[@]}" tests/
    PYTEST_LINE=$(grep -E '(passed|failed|skipped|error|no tests ran)' "$OUT/pytest.log" | tail -n 1 || true)
    [ "$RC" = 124 ] && PYTEST_LINE="TIMED OUT after ${cap}s; last: $PYTEST_LINE"
    if [ "$SIMULATE" = 1 ] && [ "$RC" = 5 ]; then
        note "simulation: no GPU, so no test ran (pytest rc 5) as expected"
        RC=0
    fi
    record pytest "$RC" $((SECONDS - start)) "$PYTEST_LINE"
}

step_c_check() {
    banner "3b. C program: GPU handle against CPU handle, every entry point, --huge"
    local start=$SECONDS
    if [ "$SIMULATE" = 1 ] || [ ! -x "${C_CHECK:-}" ]; then
        note "no GPU build of ${C_CHECK:-miopen_bn_gpu_vs_cpu}: skipped"
        record c_check 0 0 "skipped (no GPU build)"
        return 0
    fi
    run_logged c_check "$OUT/c_check.log" timeout -k 10 150 "$C_CHECK" --huge
    local first=$RC summary
    summary="$(grep -E 'passed' "$OUT/c_check.log" | tail -n 1 || echo 'no summary')"
    # The multi-launch kernels too, on every training and backward call
    # (the small shapes included, which other algorithms take by default).
    MIOPEN_BN_GPU_ALGORITHM=multi_pass run_logged c_check_multi "$OUT/c_check_multi.log" \
        timeout -k 10 120 "$C_CHECK" --quick
    summary="$summary; multi-launch --quick: $(grep -E 'passed' "$OUT/c_check_multi.log" | tail -n 1 || echo 'no summary')"
    [ "$first" = 0 ] || RC=$first
    record c_check "$RC" $((SECONDS - start)) "$summary"
}

# The driver on one ResNet-50 layer (issue 7 records its GB/s next to the
# bench's figure for the same call).
step_driver() {
    banner "3c. miopen-bn-driver on the GPU: 32x256x56x56, training forward and backward"
    local start=$SECONDS rc_all=0 dtype
    if [ "$SIMULATE" = 1 ]; then
        record driver 0 0 "skipped (simulation)"
        return 0
    fi
    for dtype in bnorm bnormfp16fp32; do
        run_logged driver "$OUT/driver.log" timeout -k 10 90 "$PYTHON" -m miopen_bn.driver "$dtype" \
            -n 32 -c 256 -H 56 -W 56 -m 1 --forw 1 -b 1 -s 1 -r 1 -V 1 -t 1 -i 20 --backend gpu
        [ "$RC" = 0 ] || rc_all=$RC
    done
    RC=$rc_all
    record driver "$RC" $((SECONDS - start)) "$(grep -c '^stats: bn_' "$OUT/driver.log") stats lines"
}

# compute-sanitizer's memcheck (out-of-bounds and misaligned accesses, leaks
# of device memory) and racecheck (shared-memory hazards in our block
# reductions) on the C program: only our kernels and copies, no framework.
# sanitize LABEL TOOL RESULT_REGEX ARGS...: compute-sanitizer's TOOL over
# ARGS (its own options first, then the program), logged to
# sanitizer_LABEL.log; appends the tool's summary and the program's last line
# matching RESULT_REGEX to sanitizer.log.  For step_sanitizer: uses its
# `sanitizer` and sets its `rc` on failure.
sanitize() {
    local label=$1 tool=$2 result=$3 log="$OUT/sanitizer_$1.log" line
    shift 3
    run_logged "sanitizer-$label" "$log" timeout -k 10 "$SANITIZER_S" "$sanitizer" \
        --tool "$tool" --error-exitcode 97 --print-limit 20 "$@"
    [ "$RC" = 0 ] || rc=$RC
    line=$(grep -E '(ERROR|RACECHECK) SUMMARY' "$log" | tail -n 1 | sed 's/^=* *//')
    [ "$RC" = 124 ] && line="TIMED OUT after ${SANITIZER_S}s; last: $line"
    printf 'sanitizer-%s: %s; program: %s\n' "$label" "${line:-no summary}" \
        "$(grep -E "$result" "$log" | tail -n 1)" | tee -a "$OUT/sanitizer.log"
}

step_sanitizer() {
    banner "3c. compute-sanitizer memcheck + racecheck: $(basename "${C_CHECK:-gpu_vs_cpu}") --quick --filter '$SANITIZER_FILTER'"
    local start=$SECONDS sanitizer tool rc=0
    : > "$OUT/sanitizer.log"
    sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    if [ "$SIMULATE" = 1 ] || [ ! -x "${C_CHECK:-}" ] || [ ! -x "$sanitizer" ]; then
        note "no GPU build of the C program or no compute-sanitizer ($sanitizer): skipped"
        record sanitizer 0 0 "skipped (no GPU build or no compute-sanitizer)"
        RC=0
        return 0
    fi
    for tool in memcheck racecheck; do
        local extra=()
        [ "$tool" = memcheck ] && extra=(--leak-check full)
        sanitize "$tool" "$tool" 'passed, .* failed' "${extra[@]}" "$C_CHECK" --quick --filter "$SANITIZER_FILTER"
    done
    # Group norm has no C program: its GPU tests (forward and backward over
    # every dtype, layout, activation and affine mode) under both tools.
    for tool in memcheck racecheck; do
        sanitize "gn-$tool" "$tool" '(passed|failed)' "$PYTHON" -m pytest -m gpu -q -p no:cacheprovider \
            tests/gpu/test_gpu_groupnorm.py -k "test_forward or test_backward"
    done
    RC=$rc
    record sanitizer "$RC" $((SECONDS - start)) "$(tr '\n' ' ' < "$OUT/sanitizer.log")"
}

# Nsight Compute on chosen calls (GPU_CHECK_PROFILE_CASES, cases as
# bench/profile_kernels.py takes them): one line per kernel with its time,
# DRAM bytes, occupancy and registers (bench/ncu_summary.py).
step_profile() {
    banner "3d. ncu on: ${GPU_CHECK_PROFILE_CASES:-}"
    local start=$SECONDS ncu
    ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -n 1 || true)
    if [ "$SIMULATE" = 1 ] || [ -z "${GPU_CHECK_PROFILE_CASES:-}" ] || [ -z "$ncu" ]; then
        record profile 0 0 "skipped (no cases, no ncu or simulation)"
        RC=0
        return 0
    fi
    run_logged profile "$OUT/profile.log" timeout -k 10 "${GPU_CHECK_PROFILE_S:-150}" "$ncu" \
        --profile-from-start off --clock-control none --csv --log-file "$OUT/ncu.csv" \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__grid_size,launch__block_size \
        "$PYTHON" bench/profile_kernels.py $GPU_CHECK_PROFILE_CASES
    "$PYTHON" bench/ncu_summary.py "$OUT/ncu.csv" | tee "$OUT/ncu_summary.txt" || true
    record profile "$RC" $((SECONDS - start)) "$(wc -l < "$OUT/ncu_summary.txt" 2>/dev/null || echo 0) kernels profiled"
}

step_ab() {
    banner "3e. A/B: ${GPU_CHECK_AB:-}"
    local start=$SECONDS variant name settings jsons=() rc_all=0
    if [ "$SIMULATE" = 1 ] || [ -z "${GPU_CHECK_AB:-}" ]; then
        record ab 0 0 "skipped (no GPU_CHECK_AB or simulation)"
        RC=0
        return 0
    fi
    for variant in $GPU_CHECK_AB; do
        name=${variant%%:*}
        settings=${variant#*:}
        # shellcheck disable=SC2086
        run_logged "ab-$name" "$OUT/ab.log" env ${settings//,/ } timeout -k 10 "${GPU_CHECK_AB_S:-150}" \
            "$PYTHON" bench/bench.py --backend gpu ${GPU_CHECK_AB_ARGS:-} \
            --json "$OUT/ab_$name.json" --markdown "$OUT/ab_$name.md" --plot "$OUT/ab_$name.png"
        [ "$RC" = 0 ] || rc_all=$RC
        rm -f "$OUT/ab_$name.md" "$OUT/ab_$name.png"
        jsons+=("$OUT/ab_$name.json")
    done
    "$PYTHON" bench/ab_compare.py "${jsons[@]}" | tee "$OUT/ab_compare.txt" || rc_all=1
    RC=$rc_all
    record ab "$RC" $((SECONDS - start)) "$(grep -c . "$OUT/ab_compare.txt" 2>/dev/null || echo 0) lines in ab_compare.txt"
}

step_bench() {
    banner "4. bench"
    local start=$SECONDS budget dev args=()
    budget=$(( BUDGET_S - SECONDS - 45 ))
    [ "$budget" -lt 30 ] && budget=30
    if [ "$SIMULATE" = 1 ]; then
        dev=simulated-cpu
        args=(--backend cpu --quick --ops bn_infer --layouts nchw)
    else
        dev=$("$PYTHON" -c "import re, torch; print(re.sub('[^a-z0-9]+', '-', torch.cuda.get_device_name(0).lower()).strip('-'))")
        args=(--backend gpu)
    fi
    # shellcheck disable=SC2206
    args+=(${GPU_CHECK_BENCH_ARGS:-})
    note "bench time budget ${budget}s (hard cap $((budget + 60))s)"
    run_logged bench "$OUT/bench.log" timeout -k 10 $((budget + 60)) "$PYTHON" bench/bench.py \
        "${args[@]}" --budget-s "$budget" \
        --json "$OUT/$dev.json" --markdown "$OUT/$dev.md" --plot "$OUT/roofline_$dev.png"
    record bench "$RC" $((SECONDS - start)) "$(grep -E '^  rows:' "$OUT/bench.log" | tail -n 1 || echo 'no summary')"
}

main() {
    banner "miopen-bn gpu_check in $PWD, OUT=$OUT, budget ${BUDGET_S}s, simulate=$SIMULATE, $(date -u '+%F %T UTC')"
    local failed=0
    BUILD_OK=0
    step_machine
    if step_wheels && step_build; then
        BUILD_OK=1
        for step in pytest c_check sanitizer driver profile ab bench; do
            if [[ "$SKIP" == *" $step "* ]]; then
                record "$step" - 0 "skipped (GPU_CHECK_SKIP)"
                continue
            fi
            "step_$step" || true
            [ "$RC" = 0 ] || failed=1
        done
    else
        failed=1
        note "no usable build: tests and bench not run"
    fi
    banner "summary"
    printf '%s\n' "${SUMMARY[@]}"
    if [ "$BUILD_OK" != 1 ] && [ -f "$OUT/build.log" ]; then
        echo "first build errors (whole log in build.log):"
        grep -E 'error|Error|FAILED' "$OUT/build.log" | head -n 20 | cut -c1-300 || true
    fi
    if [ -f "$OUT/pytest.log" ] && grep -qE '^(FAILED|ERROR)' "$OUT/pytest.log"; then
        echo "failing tests (first 25; details in pytest.log):"
        grep -E '^(FAILED|ERROR)' "$OUT/pytest.log" | head -n 25 | cut -c1-300
    fi
    if [ -f "$OUT/bench.log" ] && grep -qE ' NO( |$)' "$OUT/bench.log"; then
        echo "bench rows NOT verified (first 15; details in bench.log / the JSON):"
        grep -E ' NO( |$)' "$OUT/bench.log" | head -n 15 | cut -c1-300
    fi
    if [ -f "$OUT/driver.log" ]; then
        echo "driver stats (32x256x56x56, GPU):"
        grep -E '^(stats: bn_|.*kernel time)' "$OUT/driver.log" || true
    fi
    if [ -f "$OUT/bench.log" ]; then
        echo "bench reading:"
        sed -n '/^bench summary:/,$p' "$OUT/bench.log" | head -n 30
    fi
    echo "files in \$OUT:"; ls -la "$OUT"
    return $failed
}

main 2>&1 | tee "$OUT/gpu_check.log"
exit "${PIPESTATUS[0]}"
