"""The command line: exit codes, help, and a quick benchmark run writing its results file."""
import subprocess
import sys


def _run(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "optkernels", *args], capture_output=True, text=True,
                          timeout=600, cwd=cwd)


def test_no_command_is_an_error():
    result = _run()
    assert result.returncode == 2
    assert "command" in result.stderr


def test_unknown_command_is_one_clear_error():
    result = _run("frobnicate")
    assert result.returncode == 2
    assert "invalid choice: 'frobnicate'" in result.stderr


def test_bench_help():
    result = _run("bench", "--help")
    assert result.returncode == 0
    assert "--quick" in result.stdout


def test_bench_quick_writes_results(tmp_path):
    result = _run("bench", "--quick", "--only", "dense", "cold", "--sizes", "1e3", "--no-plot", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "apply_adam" in result.stdout and "import optkernels < 0.3 s" in result.stdout
    (report,) = tmp_path.glob("*-quick.md")
    text = report.read_text()
    assert "| dense | apply_adam | optkernels | 1e+03 |" in text
    assert "apply_adam first call" in text


def test_a_reader_that_goes_away_gets_no_traceback():
    """``python -m optkernels ... | head``: when the pipe's reader exits early, the command stops quietly."""
    command = [sys.executable, "-m", "optkernels", "verify", "--ops", "apply_adam", "--cases", "1"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    process.stdout.close()  # the reader is gone before anything is written
    stderr = process.stderr.read()
    process.stderr.close()
    assert process.wait(timeout=600) == 1
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr


def test_info_names_the_layer_threads_cache_and_cuda():
    import numba

    result = _run("info")
    assert result.returncode == 0, result.stderr
    lines = dict(line.split(": ", 1) for line in result.stdout.splitlines() if ": " in line)
    assert lines["threading layer"].split(",")[0] in ("tbb", "omp", "workqueue")
    assert lines["threads"].startswith(f"{numba.config.NUMBA_NUM_THREADS} ")
    assert "kernel cache" in lines and "CUDA" in lines
    assert f"numba {numba.__version__}" in lines["packages"]


def test_warmup_compiles_into_the_cache(tmp_path):
    """``warmup`` fills Numba's cache (here a fresh NUMBA_CACHE_DIR): apply_adam's float32 and float64 loops
    and its float16/bfloat16 drivers are there afterwards."""
    import os

    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    result = subprocess.run([sys.executable, "-m", "optkernels", "warmup", "--ops", "apply_adam", "--jobs", "1"],
                            capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr
    assert "apply_adam" in result.stdout and "compiled into the cache" in result.stdout
    data = [p.name for p in tmp_path.rglob("*.nbc")]
    # the chunked launch's entry (one file per signature, its worker inside), float32/float64
    assert sum(name.startswith("adam._chunked__adam_") for name in data) == 2, data
    assert any("f16" in name for name in data) and any("bf16" in name for name in data), data


def test_warmup_refuses_an_unknown_op():
    result = _run("warmup", "--ops", "apply_nadam")
    assert result.returncode == 2 and "unknown op(s) apply_nadam" in result.stderr


def test_verify_compiles_in_worker_processes_first():
    result = _run("verify", "--ops", "apply_adam", "--cases", "4", "--jobs", "2")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("compiling the kernels in 2 processes first")
    assert "1 passed, 0 failed" in result.stdout
