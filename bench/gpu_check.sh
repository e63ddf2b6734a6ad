#!/usr/bin/env bash
# The GPU checks in one call, for a machine with an NVIDIA GPU and the project's dependencies installed
# (run from the repository root): the CUDA tests on the GPU, `verify --target cuda` beside them, then alone
# the GPU bench group. Results go to ${OUT:-/tmp/gpu-check}.
#
# Wheels in .whl/ (if any) are installed to /tmp/site first: numba-cuda 0.30.4 fails under numpy 2.5
# (it calls np.row_stack), so an image with numpy 2.5 needs numpy 2.4 carried as a wheel.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
if compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit
    export PYTHONPATH=$PWD:/tmp/site
else
    export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1
(timeout "${VERIFY_S:-200}" python3 -m optkernels verify --target cuda --cases 3 > "$OUT/verify.txt" 2>&1
 echo "verify exit $?" >> "$OUT/verify.txt") &
parallel=()  # pytest-xdist and pytest-timeout where installed (the lent GPU machines have both)
python3 -c "import xdist" 2> /dev/null && parallel+=(-n "${WORKERS:-14}")
python3 -c "import pytest_timeout" 2> /dev/null && parallel+=(--timeout 140)
timeout "${TEST_S:-240}" python3 -m pytest tests/cuda tests/test_cuda_nvvm.py -p no:cacheprovider \
    "${parallel[@]}" -rfEs > "$OUT/cuda-tests.log" 2>&1
echo "pytest exit $?"
grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/cuda-tests.log" | tail -40
wait
tail -3 "$OUT/verify.txt"
timeout "${BENCH_S:-60}" python3 -m optkernels bench --only gpu --out "$OUT" --no-plot > "$OUT/bench.log" 2>&1
echo "bench exit $?"
grep -E "^  gpu |GPU " "$OUT/bench.log" | cut -c1-150 | tail -40
