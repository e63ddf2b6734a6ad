"""The documented mpi4py training script (examples/distributed_train.py) runs under ``mpiexec -n 2``: the loss falls, and the head weight
ends bit-identical on both ranks."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = (ROOT / "examples" / "distributed_train.py").read_text()


def test_training_script_on_two_ranks(tmp_path):
    pytest.importorskip("mpi4py", reason="mpi4py is not installed (pip install 'optkernels[mpi]')")
    mpiexec = shutil.which("mpiexec")
    if mpiexec is None:
        pytest.skip("no mpiexec on PATH (pip install 'optkernels[mpi]' installs MPICH's)")
    check = ("\nweights = comm.allgather(w.data.tobytes())\n"
             "if comm.Get_rank() == 0:\n    print('same weights', weights[0] == weights[1])\n")
    (tmp_path / "train.py").write_text(SCRIPT + check)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               NUMBA_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([mpiexec, "-n", "2", sys.executable, "train.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    losses = [float(x) for x in re.findall(r"loss (\d+\.\d+)", done.stdout)]
    assert len(losses) == 3, done.stdout
    assert losses[-1] < 0.5 * losses[0], done.stdout
    assert "same weights True" in done.stdout
