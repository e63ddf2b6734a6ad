#!/usr/bin/env bash
# The GPU checks in one call, for a machine with an NVIDIA GPU and the project's dependencies installed
# (run from the repository root): the CUDA tests on the GPU, `verify --target cuda` beside them, then alone
# the GPU bench group. Results go to ${OUT:-/tmp/gpu-check}.
#
# Wheels in .whl/ (if any) are installed first: numba-cuda 0.30.4 fails under numpy 2.5 (it calls
# np.row_stack), so an image with numpy 2.5 needs numpy 2.4 carried as a wheel; the tbb and tcmlib wheels
# (a newcomer's install has them: Numba's TBB layer) go in with --prefix, which keeps their libraries
# (--target drops them), the others in /tmp/site.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
export PYTHONPATH=$PWD
plain=() prefixed=()
for wheel in .whl/*.whl; do
    [ -e "$wheel" ] || continue
    case $(basename "$wheel") in tbb-*|tcmlib-*) prefixed+=("$wheel") ;; *) plain+=("$wheel") ;; esac
done
if [ ${#plain[@]} -gt 0 ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        "${plain[@]}" || exit
    PYTHONPATH=$PYTHONPATH:/tmp/site
fi
if [ ${#prefixed[@]} -gt 0 ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --prefix /tmp/prefix \
        "${prefixed[@]}" || exit
    PYTHONPATH=$PYTHONPATH:$(echo /tmp/prefix/lib/python3*/site-packages)
fi
export PYTHONPATH
export PYTHONUNBUFFERED=1
python3 -c "import numba, numpy as np; from optkernels.kernels import adam_no_update_param as step
a = np.zeros(1 << 20, np.float32); step(a, a.copy(), 0.0, 0.0, 1e-3, 0.9, 0.999, 1e-8, a.copy())
print('numba', numba.__version__, 'numpy', np.__version__, 'threading layer', numba.threading_layer())"
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
