"""optkernels.distributed without mpiexec: the owner assignment, the import layering (``import optkernels``
and the optimizers never load mpi4py or optkernels.distributed), and ``comm=`` before the package is
imported. The collectives themselves are tested under mpiexec in tests/mpi."""
import subprocess
import sys

import pytest

from optkernels.distributed import assign_owners


def test_assign_owners_balanced_and_stable():
    sizes = [4000, 40, 2000, 1600, 360, 8, 8, 0]
    for size in (1, 2, 3, 8):
        owners = assign_owners(sizes, size)
        assert owners == assign_owners(list(sizes), size)
        load = [sum(s for s, o in zip(sizes, owners) if o == r) for r in range(size)]
        assert max(load) <= sum(sizes) / size + max(sizes)
        assert set(owners) == set(range(size))      # 8 parameters: every rank owns one, even at 8 ranks
    assert assign_owners([4000, 40, 2000, 1600, 360], 2) == [0, 1, 1, 1, 1]
    assert assign_owners([10, 10, 10], 3) == [0, 1, 2]


def run(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_optimizers_do_not_import_mpi_or_distributed():
    out = run("import sys, optkernels, optkernels.optimizers, optkernels.sparse\n"
              "print(sorted(m for m in sys.modules if m.startswith(('mpi4py', 'optkernels.distributed'))))")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    out = run("import sys, optkernels.distributed\n"
              "print('mpi4py.MPI' in sys.modules)")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_comm_before_the_package_is_imported():
    out = run("import numpy as np\n"
              "from optkernels.optimizers import Adam, Parameter\n"
              "try:\n"
              "    Adam([Parameter(np.zeros(3, np.float32), 'w')], comm=object())\n"
              "except RuntimeError as e:\n"
              "    print(e)\n")
    assert out.returncode == 0, out.stderr
    assert "import optkernels.distributed" in out.stdout


def test_layering_in_the_sources():
    """No import statement below distributed/ names it or mpi4py (the hook is installed from above)."""
    import ast
    from pathlib import Path

    import optkernels

    root = Path(optkernels.__file__).parent
    for sub in ("kernels", "sparse", "optimizers", "reference", "conformance"):
        for path in (root / sub).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    names = [node.module or ""] + [a.name for a in node.names]
                else:
                    continue
                assert not any("distributed" in n or n.startswith("mpi4py") for n in names), (path, names)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__]))


FINGERPRINT = """
import functools, numpy as np
from optkernels.distributed._fingerprint import config_fields, digest_fields
from optkernels.optimizers import Adam, ExponentialDecayLR, LazyAdam, Parameter
lr = 0.01
opt = Adam([Parameter(np.zeros(3, np.float32), "w")], learning_rate=ExponentialDecayLR(0.1, 0.9, 4),
           beta1=0.8)
print(digest_fields(config_fields(opt)).hex())
print(digest_fields({"f": lambda ps: LazyAdam(ps, learning_rate=lr),
                     "p": functools.partial(LazyAdam, eps=1e-6)}).hex())
"""


def test_fingerprints_are_the_same_in_every_process():
    """What ranks compare must not depend on the process (hash randomization, addresses): two interpreters
    with different hash seeds print the same digests."""
    import os

    outs = [subprocess.run([sys.executable, "-c", FINGERPRINT], capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, PYTHONHASHSEED=seed)) for seed in ("1", "2")]
    assert all(o.returncode == 0 for o in outs), outs[0].stderr
    assert outs[0].stdout == outs[1].stdout and len(outs[0].stdout.split()) == 2


def test_fingerprints_tell_configurations_apart():
    import functools

    from optkernels.distributed._fingerprint import describe, fingerprint
    from optkernels.optimizers import Adam, LazyAdam

    def make(lr):
        return lambda ps: LazyAdam(ps, learning_rate=lr)

    assert fingerprint(make(0.1)) == fingerprint(make(0.1))
    assert fingerprint(make(0.1)) != fingerprint(make(0.2))               # the captured value counts
    assert fingerprint(functools.partial(LazyAdam, learning_rate=0.1)) != fingerprint(
        functools.partial(LazyAdam, learning_rate=0.2))
    assert fingerprint(LazyAdam) != fingerprint(Adam)
    assert describe(functools.partial(LazyAdam, learning_rate=0.1)) == "partial(LazyAdam, learning_rate=0.1)"
    assert "(capturing" in describe(make(0.1)) and describe(make(0.1)).endswith(", 0.1)")


def test_set_nonfinite_checks_its_arguments():
    import numpy as np

    from optkernels.distributed import set_nonfinite
    from optkernels.optimizers import Adam, Parameter

    with pytest.raises(TypeError, match="built with comm="):
        set_nonfinite(Adam([Parameter(np.zeros(2), "w")], 0.1), "skip")
    from optkernels.distributed._nonfinite import check_mode

    with pytest.raises(ValueError, match="'nonfinite' must be one of"):
        check_mode("Adam", "ignore")
