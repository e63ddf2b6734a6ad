"""optkernels.torch's torch.optim classes return torch.optim's bits: after every step, each parameter and
each state tensor is ``torch.equal`` to ``torch.optim.<Name>(foreach=False)``'s on the CPU, for every flag
of the class, float32 and float64, over sizes that cover vector bodies and tails; bfloat16 and float16
for the classes that reproduce torch's half rounding.

torch's CPU ``sqrt`` is MKL's vector sqrt in this wheel, correctly rounded only on some CPUs
(docs/guide/torch_bits.rst). optkernels computes IEEE ``sqrt``, or, where torch's is one of the MKL kernels
reproduced (MKL's AVX-path kernel, which AMD processors among others run, and its AVX-512 (Intel) kernel;
for float64 also its AVX2 one), that kernel (with ``OPTKERNELS_TORCH_SQRT=torch``, set here; by default
IEEE for speed). Where torch's sqrt is none of these on the machine running the tests, the rules that take
a root are compared with torch.optim running with an IEEE ``Tensor.sqrt``/``sqrt_`` (NumPy's): every
remaining difference then comes from sqrt alone. The rules without a square root (SGD, Adamax) are always
compared with torch as it is.
"""
import contextlib
import ctypes
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="optkernels.torch needs PyTorch (pip install -e '.[torch]')")
okt = pytest.importorskip("optkernels.torch", reason="optkernels.torch did not import")

from optkernels.kernels.torch_rules import (  # noqa: E402
    MKL_AVX2_SQRT64,
    MKL_AVX512_SQRT64,
    MKL_AVX_SQRT64,
    torch_sqrt_array,
)
from optkernels.torch._sqrt import ENVIRONMENT, mkl_float32_sqrt, mkl_float64_sqrt  # noqa: E402

SIZES = (1, 7, 16, 1000, 65539)
STEPS = 9


def _binade_and_randoms(dtype):
    """A slice of the float32 binades [1, 2) and [2, 4) (where MKL's non-IEEE kernels differ from IEEE in
    0.5-25 % of inputs), and random magnitudes."""
    binades = (np.arange(0, 1 << 24, 61, dtype=np.uint32) + np.uint32(0x3F800000)).view(np.float32)
    return np.concatenate([binades, np.abs(np.random.default_rng(0).standard_normal(100_003))]).astype(dtype)


def _torch_sqrt_is_ieee(dtype) -> bool:
    x = _binade_and_randoms(dtype)
    return np.array_equal(torch.from_numpy(x).sqrt().numpy(), np.sqrt(x))


#: Per dtype, True where optkernels.torch computes torch's own sqrt on this machine: IEEE, or an MKL kernel
#: reproduced. Elsewhere the rules with a root are compared with an IEEE-sqrt torch.
SAME_SQRT = {torch.float32: _torch_sqrt_is_ieee(np.dtype(np.float32)) or mkl_float32_sqrt() != 0,
             torch.float64: _torch_sqrt_is_ieee(np.dtype(np.float64)) or mkl_float64_sqrt() != 0}


@contextlib.contextmanager
def _ieee_sqrt():
    """``Tensor.sqrt`` and ``Tensor.sqrt_`` correctly rounded (NumPy's sqrt) for CPU tensors."""
    sqrt, sqrt_ = torch.Tensor.sqrt, torch.Tensor.sqrt_

    def ieee(self):
        return torch.from_numpy(np.sqrt(self.detach().numpy()))

    def ieee_(self):
        self.copy_(ieee(self))
        return self

    torch.Tensor.sqrt, torch.Tensor.sqrt_ = ieee, ieee_
    try:
        yield
    finally:
        torch.Tensor.sqrt, torch.Tensor.sqrt_ = sqrt, sqrt_


TAKES_SQRT = {"Adam", "AdamW", "Adagrad", "RMSprop"}

# (class, flags): every flag of each class, alone and combined; betas/alpha chosen so that torch's lerp takes
# both of its branches (weight below and above 0.5)
CASES = [
    ("Adam", {}),
    ("Adam", dict(amsgrad=True)),
    ("Adam", dict(weight_decay=0.1, maximize=True)),
    ("Adam", dict(weight_decay=0.1, decoupled_weight_decay=True, amsgrad=True)),
    ("Adam", dict(betas=(0.3, 0.8), eps=1e-3, lr=torch.tensor(0.01))),
    ("AdamW", {}),
    ("AdamW", dict(amsgrad=True, maximize=True, weight_decay=0.3)),
    ("AdamW", dict(weight_decay=0.0, betas=(0.4, 0.99))),
    ("AdamW", dict(lr=torch.tensor(0.01), amsgrad=True)),
    ("Adamax", {}),
    ("Adamax", dict(weight_decay=0.1, maximize=True, betas=(0.2, 0.9), eps=1e-2)),
    ("Adamax", dict(lr=torch.tensor(0.01, dtype=torch.float64))),
    ("Adagrad", {}),
    ("Adagrad", dict(lr_decay=0.01, weight_decay=0.1, initial_accumulator_value=0.1, maximize=True)),
    ("Adagrad", dict(lr=torch.tensor(0.1), lr_decay=0.1)),
    ("RMSprop", {}),
    ("RMSprop", dict(centered=True)),
    ("RMSprop", dict(momentum=0.9, weight_decay=0.1)),
    ("RMSprop", dict(centered=True, momentum=0.5, maximize=True, alpha=0.3)),
    ("RMSprop", dict(lr=torch.tensor(0.01), momentum=0.5)),
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.1, weight_decay=0.1, maximize=True)),
    ("SGD", dict(lr=0.1, momentum=0.9)),
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
    ("SGD", dict(lr=0.1, momentum=0.6, dampening=0.3, maximize=True)),
    ("SGD", dict(lr=torch.tensor(0.1), momentum=0.9, weight_decay=0.1)),
]


def _ids(case):
    name, flags = case
    return name + "".join(f"-{k}" for k in flags)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_every_step_is_torch_bits(case, dtype, monkeypatch):
    monkeypatch.setenv(ENVIRONMENT, "torch")
    name, flags = case
    gen = torch.Generator().manual_seed(len(name) * 31 + len(flags))
    init = [torch.randn(n, generator=gen, dtype=torch.float64).to(dtype) for n in SIZES]
    theirs = [t.clone().requires_grad_() for t in init]
    ours = [t.clone().requires_grad_() for t in init]
    reference = getattr(torch.optim, name)(theirs, foreach=False, **flags)
    optimizer = getattr(okt, name)(ours, **flags)
    patch = _ieee_sqrt if name in TAKES_SQRT and not SAME_SQRT[dtype] else contextlib.nullcontext
    for step in range(STEPS):
        for a, b in zip(theirs, ours):
            g = torch.randn(a.shape, generator=gen, dtype=torch.float64).to(dtype)
            a.grad, b.grad = g, g.clone()
        with patch():
            reference.step()
        optimizer.step()
        for k, (a, b) in enumerate(zip(theirs, ours)):
            assert torch.equal(a, b), f"step {step + 1}, size {SIZES[k]}: parameter differs"
            state_a, state_b = reference.state[a], optimizer.state[b]
            assert set(state_a) == set(state_b)
            for key, value in state_a.items():
                assert torch.equal(value, state_b[key]), f"step {step + 1}, size {SIZES[k]}: {key} differs"



HALF_SIZES = (1, 1000, 65539)  # a lone element, a vector tail, two torch threads' chunks (each with a tail)
# Adafactor factors the moments of matrices (and batches of them): these too, one of them over two chunks
HALF_SHAPES = {"Adafactor": HALF_SIZES + ((37, 29), (2, 3, 4), (300, 220))}
BF16, F16 = torch.bfloat16, torch.float16

# (class, flags, dtype): every flag of each class in bfloat16 or float16, each class in both dtypes
HALF_CASES = [
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01), BF16),
    ("SGD", dict(lr=0.1, momentum=0.6, dampening=0.3, maximize=True), F16),
    ("SGD", dict(lr=torch.tensor(0.1), weight_decay=0.1), BF16),
    ("Adam", dict(weight_decay=0.1, maximize=True, amsgrad=True), BF16),
    ("Adam", dict(betas=(0.3, 0.8), eps=1e-3, lr=torch.tensor(0.01)), F16),
    ("Adam", dict(weight_decay=0.1, decoupled_weight_decay=True), F16),
    ("AdamW", dict(weight_decay=0.3, amsgrad=True), F16),
    ("AdamW", {}, BF16),
    ("Adamax", dict(weight_decay=0.1, maximize=True, betas=(0.2, 0.9), eps=1e-2), BF16),
    ("Adamax", {}, F16),
    ("Adagrad", dict(lr_decay=0.01, weight_decay=0.1, initial_accumulator_value=0.1, maximize=True), F16),
    ("Adagrad", {}, BF16),
    ("RMSprop", dict(centered=True, momentum=0.5, maximize=True, alpha=0.3, weight_decay=0.1), BF16),
    ("RMSprop", dict(momentum=0.9, weight_decay=0.1), F16),
    ("RMSprop", dict(centered=True), F16),
    ("RMSprop", {}, BF16),
    ("NAdam", dict(lr=0.01, weight_decay=0.1, momentum_decay=0.01), F16),
    ("NAdam", dict(weight_decay=0.1, decoupled_weight_decay=True, maximize=True, betas=(0.4, 0.9)), BF16),
    ("RAdam", {}, BF16),  # rectified from step 6
    ("RAdam", dict(weight_decay=0.1, decoupled_weight_decay=True, maximize=True), F16),
    ("RAdam", dict(lr=0.01, weight_decay=0.1, betas=(0.6, 0.5)), BF16),  # never rectified
    ("Adadelta", {}, F16),
    ("Adadelta", dict(lr=0.5, rho=0.5, weight_decay=0.1, maximize=True), BF16),
    ("ASGD", dict(lr=0.05, lambd=0.1, alpha=0.5, t0=3, weight_decay=0.1, maximize=True), BF16),
    ("ASGD", {}, F16),
    ("Rprop", {}, BF16),
    ("Rprop", dict(lr=0.1, etas=(0.3, 1.5), step_sizes=(0.05, 0.2), maximize=True), F16),
    ("Adafactor", {}, BF16),
    ("Adafactor", dict(lr=0.05, weight_decay=0.1, maximize=True, eps=(1e-3, 1e-2), d=1.5, beta2_decay=-0.5), F16),
]


def _same_half(a, b):
    """Bit for bit, NaN included; for float16, any NaN equals any NaN (the sign of a NaN computed from two NaN
    operands depends on the order in which compiled code takes them: docs/guide/torch_bits.rst)."""
    a, b = a.detach(), b.detach()
    same = a.view(torch.int16) == b.view(torch.int16)
    if a.dtype == torch.float16:
        same |= a.isnan() & b.isnan()
    return bool(same.all())


def _with_nan(g, step):
    """NaN in vector bodies and scalar tails: as ``fill_`` writes them (bfloat16 0x7FC0) on steps 1 and 2, as an
    operation writes them (0xFFFF in its vector body) on step 4."""
    flat = g.view(-1)
    if step < 2:
        flat[3::97] = float("nan")
        flat[-2:] = float("nan")
    elif step == 3:
        mask = torch.ones_like(flat)
        mask[5::89] = float("nan")
        mask[-3:-1] = float("nan")
        flat.copy_(flat * mask)
    return g


def _half_steps(name, flags, dtype, nan=False, steps=8):
    gen = torch.Generator().manual_seed(len(name) * 7 + len(flags))
    sizes = HALF_SHAPES.get(name, HALF_SIZES)
    init = [torch.randn(n, generator=gen).to(dtype) for n in sizes]
    theirs = [t.clone().requires_grad_() for t in init]
    ours = [t.clone().requires_grad_() for t in init]
    reference = getattr(torch.optim, name)(theirs, foreach=False, **flags)
    optimizer = getattr(okt, name)(ours, **flags)
    seen = set()  # the bits of torch's NaN
    for step in range(steps):
        for a, b in zip(theirs, ours):
            g = torch.randn(a.shape, generator=gen).to(dtype)
            g = _with_nan(g, step) if nan else g
            a.grad, b.grad = g, g.clone()
        reference.step()
        optimizer.step()
        for k, (a, b) in enumerate(zip(theirs, ours)):
            assert _same_half(a, b), f"step {step + 1}, size {sizes[k]}: parameter"
            state_a, state_b = reference.state[a], optimizer.state[b]
            assert set(state_a) == set(state_b)
            for key, value in state_a.items():
                if value.dim():
                    assert value.dtype == dtype and _same_half(value, state_b[key]), \
                        f"step {step + 1}, size {sizes[k]}: {key} differs"
                else:
                    assert torch.equal(value, state_b[key])
            nans = [t.detach()[t.isnan()].view(torch.int16) for t in (a, *state_a.values()) if t.dim()]
            seen.update(torch.cat(nans).tolist())
    return seen


@pytest.mark.parametrize("case", HALF_CASES, ids=[_ids(c[:2]) + "-" + str(c[2]).split(".")[1] for c in HALF_CASES])
def test_half_steps_are_torch_bits(case):
    """bfloat16/float16 parameters: torch rounds every operation's float32 result to the parameter's dtype;
    so do the drop-ins. Compared bit for bit (float16's ``eps`` of 1e-8 rounds to 0: NaN appear)."""
    _half_steps(*case)


# bfloat16 NaN: torch writes 0xFFFF in its loops' vector bodies, 0x7FC0 in their scalar tails, and copies
# (a gradient cloned into SGD's first momentum buffer, Rprop's ``prev``, ASGD's ``ax``) keep their bits
NAN_CASES = [
    ("Adam", dict(amsgrad=True, maximize=True, weight_decay=0.1)),
    ("Adamax", dict(maximize=True)),
    ("Adagrad", {}),
    ("RMSprop", dict(centered=True, momentum=0.5)),
    ("SGD", dict(lr=0.1, momentum=0.9)),
    ("NAdam", {}),
    ("RAdam", {}),
    ("Adadelta", {}),
    ("ASGD", dict(t0=3)),
    ("Rprop", dict(maximize=True)),
    ("Adafactor", {}),
]


@pytest.mark.parametrize("case", NAN_CASES, ids=[_ids(c) for c in NAN_CASES])
def test_bfloat16_nan_bits_are_torchs(case):
    """NaN gradients (bfloat16 0x7FC0 and 0xFFFF, in vector bodies and tails): every parameter and state
    tensor bit for bit with torch's, NaN included."""
    seen = _half_steps(*case, BF16, nan=True, steps=5)
    assert 0x7FC0 in seen and seen - {0x7FC0, -64}  # NaN other than the quiet NaN of either sign were written


@pytest.mark.parametrize("threads", [1, 3])
def test_half_tails_move_with_torchs_thread_count(threads):
    """torch's scalar tails end its threads' chunks, which move with its thread count: with 1 and 3 threads
    (one chunk of 65,539 elements; three of 21,847, each with a tail inside one of the drop-in's blocks) the
    drop-in still writes torch's bits, NaN bits and the tail's rounding of weight decay included."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        seen = _half_steps("Adam", dict(amsgrad=True, maximize=True, weight_decay=0.1), BF16, nan=True, steps=3)
    finally:
        torch.set_num_threads(before)
    assert 0x7FC0 in seen and seen - {0x7FC0, -64}


def test_half_gradients_written_in_place_replaced_and_moved():
    """A bfloat16 plan is checked by the compiled guard and keeps its gradient's bits between steps: a
    gradient written in place, a new one, one swapped for a view of another tensor's memory (a new address),
    and a parameter without a gradient for a step still give torch's bits."""
    gen = torch.Generator().manual_seed(3)
    init = [torch.randn(n, generator=gen).to(BF16) for n in (1000, 33)]
    theirs = [t.clone().requires_grad_() for t in init]
    ours = [t.clone().requires_grad_() for t in init]
    reference, optimizer = torch.optim.Adam(theirs, foreach=False), okt.Adam(ours)
    for step in range(6):
        for k, (a, b) in enumerate(zip(theirs, ours)):
            g = torch.randn(a.shape, generator=gen).to(BF16)
            if step == 4 and k == 1:
                a.grad = b.grad = None
            elif step in (1, 2) and b.grad is not None:  # in place: the same address, new values
                a.grad.copy_(g)
                b.grad.copy_(g)
            elif step == 3:  # views into the middle of a larger tensor: a new address
                a.grad, b.grad = torch.cat([g, g])[a.numel():], torch.cat([g, g])[a.numel():]
            else:
                a.grad, b.grad = g, g.clone()
        reference.step()
        optimizer.step()
        for a, b in zip(theirs, ours):
            assert _same_half(a, b), f"step {step + 1}: parameter"
            for key in ("exp_avg", "exp_avg_sq"):
                assert _same_half(reference.state[a][key], optimizer.state[b][key]), f"step {step + 1}: {key}"
        if step in (1, 2):
            assert optimizer._plans[0].guard is not None  # the compiled check served these steps


SPARSE_CASES = [
    ("SparseAdam", {}),
    ("SparseAdam", dict(maximize=True, betas=(0.3, 0.9), lr=0.01)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.01, initial_accumulator_value=0.1)),
    ("Adagrad", dict(maximize=True, eps=1e-3)),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("case", SPARSE_CASES, ids=[_ids(c) for c in SPARSE_CASES])
def test_sparse_gradients_are_torch_bits(case, dtype, monkeypatch):
    """Uncoalesced row-sparse gradients with repeated rows (``nn.Embedding(sparse=True)``), an empty one, a
    1-D parameter and rows of 1, 7 and 1000 elements."""
    monkeypatch.setenv(ENVIRONMENT, "torch")
    name, flags = case
    gen = torch.Generator().manual_seed(7)
    init = [torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)
            for shape in [(40, 7), (30,), (5, 1000), (9, 1)]]
    theirs = [t.clone().requires_grad_() for t in init]
    ours = [t.clone().requires_grad_() for t in init]
    reference, optimizer = getattr(torch.optim, name)(theirs, **flags), getattr(okt, name)(ours, **flags)
    patch = contextlib.nullcontext if SAME_SQRT[dtype] else _ieee_sqrt
    for step in range(STEPS):
        for a, b in zip(theirs, ours):
            nnz = 0 if step == 3 else 2 * a.shape[0]
            rows = torch.randint(0, a.shape[0], (nnz,), generator=gen)
            values = torch.randn((nnz,) + a.shape[1:], generator=gen, dtype=torch.float64).to(dtype)
            g = torch.sparse_coo_tensor(rows[None], values, a.shape)
            a.grad, b.grad = g, g.clone()
        with patch():
            reference.step()
        optimizer.step()
        for a, b in zip(theirs, ours):
            assert torch.equal(a, b), f"step {step + 1}, shape {tuple(a.shape)}: parameter differs"
            for key, value in reference.state[a].items():
                if isinstance(value, torch.Tensor) and value.dim():
                    assert torch.equal(value, optimizer.state[b][key]), f"step {step + 1}: {key} differs"


@pytest.mark.skipif(not mkl_float32_sqrt(), reason="torch's float32 sqrt here is IEEE, or an MKL kernel we do "
                                                   "not reproduce")
def test_torch_float32_sqrt_reproduced_on_a_whole_binade():
    """Every float32 in [2, 4), plus zeros, infinities, NaN, negatives and subnormals (MKL's special path)."""
    x = (np.arange(1 << 23, dtype=np.uint32) + np.uint32(0x40000000)).view(np.float32)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, 1e-45, 1e-40, 2.0 ** -126, 3e38], np.float32)
    x = np.concatenate([x, special])
    theirs, ours = torch.from_numpy(x).sqrt().numpy(), torch_sqrt_array(x, mkl_float32_sqrt())
    assert np.array_equal(theirs, ours, equal_nan=True)
    numbers = ~np.isnan(theirs)
    assert np.array_equal(np.signbit(theirs[numbers]), np.signbit(ours[numbers]))
    assert not np.array_equal(ours[: 1 << 23], np.sqrt(x[: 1 << 23]))


def _mkl_kernel(name):
    """MKL's float32 sqrt kernel ``name`` as this torch wheel exports it (``(n, in, out)``), or None."""
    try:
        library = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
        function = getattr(library, name)
    except (OSError, AttributeError):
        return None

    def run(x):
        out = np.zeros_like(x)
        function(ctypes.c_int(x.size), x.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.c_void_p))
        return out

    return run


@pytest.mark.parametrize("kernel,name,flag", [(1, "mkl_vml_kernel_sSqrt_H8HAynn", "avx"),
                                              (2, "mkl_vml_kernel_sSqrt_Z0HAynn", "avx512f")], ids=["H8", "Z0"])
def test_mkl_float32_sqrt_kernels_reproduced(kernel, name, flag):
    """Both reproduced MKL kernels, called directly, on a whole binade, tiny inputs (Z0's scaled path) and all
    subnormals, whichever one torch runs here."""
    cpu_flags = Path("/proc/cpuinfo").read_text().split() if Path("/proc/cpuinfo").exists() else []
    mkl = _mkl_kernel(name)
    if mkl is None or flag not in cpu_flags:
        pytest.skip(f"{name} is not exported by this torch wheel or this CPU lacks {flag}")
    for first in (0x3F800000, 0x05000000, 0x00000001):      # [1, 2), [2^-117, 2^-116), subnormals
        x = (np.arange(1 << 23, dtype=np.uint32) + np.uint32(first)).view(np.float32)
        assert np.array_equal(mkl(x).view(np.uint32), torch_sqrt_array(x, kernel).view(np.uint32))


def _float64_sqrt_probes():
    """Random float64s of [1, 4) and of every binade, squares of integers and their neighbours, the ends of
    MKL's main path (2^-1022, 2^1022) and its special inputs (subnormals, zeros, infinities, NaN, negatives)."""
    rng = np.random.default_rng(3)
    k = np.arange(1, 100_001, dtype=np.float64) ** 2
    ends = np.array([0x0010000000000000, 0x7FCFFFFFFFFFFFFF, 0x3FF0000000000000, 0x400FFFFFFFFFFFFF], np.int64)
    return np.concatenate([
        rng.uniform(1.0, 4.0, 500_000), np.exp2(rng.uniform(-1074, 1024, 300_000)),
        np.nextafter(k, 0), k, np.nextafter(k, np.inf),
        (ends[:, None] + np.arange(-500, 500)).reshape(-1).view(np.float64),
        [0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, 5e-324, np.finfo(np.float64).max],
    ])


@pytest.mark.skipif(not mkl_float64_sqrt(), reason="torch's float64 sqrt here is IEEE, or an MKL kernel we do not "
                                                   "reproduce: the step tests compare with an IEEE-sqrt torch instead")
def test_torch_float64_sqrt_reproduced():
    x = _float64_sqrt_probes()
    theirs, ours = torch.from_numpy(x).sqrt().numpy(), torch_sqrt_array(x, mkl_float64_sqrt())
    numbers = ~np.isnan(theirs)
    assert np.array_equal(np.isnan(ours), ~numbers)
    assert np.array_equal(theirs[numbers].view(np.int64), ours[numbers].view(np.int64))
    assert np.sum(ours[numbers] != np.sqrt(x[numbers])) > 2000  # 0.7-1.6 % of the inputs: MKL's, not IEEE's


@pytest.mark.parametrize("kernel,name,flag", [(MKL_AVX_SQRT64, "mkl_vml_kernel_dSqrt_H8HAynn", "avx"),
                                              (MKL_AVX_SQRT64, "mkl_vml_kernel_dSqrt_EXHAynn", "sse4_2"),
                                              (MKL_AVX2_SQRT64, "mkl_vml_kernel_dSqrt_L9HAynn", "fma"),
                                              (MKL_AVX512_SQRT64, "mkl_vml_kernel_dSqrt_Z0HAynn", "avx512f")],
                         ids=["H8", "EX", "L9", "Z0"])
def test_mkl_float64_sqrt_kernels_reproduced(kernel, name, flag):
    """MKL's float64 kernels, called directly (whichever one torch runs here)."""
    cpu_flags = Path("/proc/cpuinfo").read_text().split() if Path("/proc/cpuinfo").exists() else []
    mkl = _mkl_kernel(name)
    if mkl is None or flag not in cpu_flags:
        pytest.skip(f"{name} is not exported by this torch wheel or this CPU lacks {flag}")
    x = _float64_sqrt_probes()
    x = x[x > 0]  # MKL's NaN for a negative input has another sign than the processor's
    assert np.array_equal(mkl(x).view(np.int64), torch_sqrt_array(x, kernel).view(np.int64))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name,flags", [("Adam", dict(amsgrad=True)), ("RMSprop", dict(centered=True, momentum=0.5)),
                                        ("Adagrad", {})], ids=["Adam", "RMSprop", "Adagrad"])
def test_ieee_sqrt_differs_from_torch_by_sqrt_alone(name, flags, dtype, monkeypatch):
    """With ``OPTKERNELS_TORCH_SQRT=ieee`` the roots are IEEE sqrt: torch.optim with an IEEE ``Tensor.sqrt``
    gives the same bits."""
    monkeypatch.setenv(ENVIRONMENT, "ieee")
    gen = torch.Generator().manual_seed(2)
    init = torch.randn(1000, generator=gen, dtype=dtype)
    a, b = init.clone().requires_grad_(), init.clone().requires_grad_()
    reference, optimizer = getattr(torch.optim, name)([a], foreach=False, **flags), getattr(okt, name)([b], **flags)
    for _ in range(STEPS):
        g = torch.randn(1000, generator=gen, dtype=dtype)
        a.grad, b.grad = g, g.clone()
        with _ieee_sqrt():
            reference.step()
        optimizer.step()
        assert torch.equal(a, b)


def test_sqrt_choice_is_checked(monkeypatch):
    from optkernels.torch._sqrt import float32_sqrt, sqrt_kernel

    monkeypatch.setenv(ENVIRONMENT, "mkl")
    with pytest.raises(ValueError, match=ENVIRONMENT):
        float32_sqrt()
    with pytest.raises(ValueError, match=ENVIRONMENT):
        sqrt_kernel(np.dtype(np.float64))
    monkeypatch.setenv(ENVIRONMENT, "torch")
    assert float32_sqrt() == mkl_float32_sqrt()
    assert sqrt_kernel(np.dtype(np.float64)) == mkl_float64_sqrt()
    assert sqrt_kernel(np.dtype(np.float16)) == 0
    monkeypatch.setenv(ENVIRONMENT, "ieee")
    assert float32_sqrt() == 0
    assert sqrt_kernel(np.dtype(np.float64)) == 0
    monkeypatch.delenv(ENVIRONMENT)  # the default: torch's own
    assert float32_sqrt() == mkl_float32_sqrt()
    assert sqrt_kernel(np.dtype(np.float64)) == mkl_float64_sqrt()


# half parameters laid out unlike their gradients: torch's ``grad.add(param, alpha=wd)`` iterates in the
# gradient's order and vectorises only runs contiguous in both (a transposed parameter: none)
STRIDED_HALF = [
    ("transposed", (13, 7), lambda t: t.t(), False),
    ("transposed-grad-alike", (13, 7), lambda t: t.t(), True),
    ("permuted-rows", (5, 3, 37), lambda t: t.permute(1, 0, 2), False),
    ("sliced", (9, 50), lambda t: t[:, :37], False),
]


@pytest.mark.parametrize("name,flags,dtype", [("Adam", dict(weight_decay=0.1), BF16),
                                              ("SGD", dict(lr=0.1, momentum=0.9, weight_decay=0.1), F16)])
@pytest.mark.parametrize("layout", STRIDED_HALF, ids=[c[0] for c in STRIDED_HALF])
def test_strided_half_parameters_with_weight_decay(layout, name, flags, dtype):
    """Transposed, permuted and sliced bfloat16/float16 parameters with contiguous gradients (or gradients
    laid out alike) and coupled weight decay: torch's bits, through the kernels."""
    _, shape, view, alike = layout
    gen = torch.Generator().manual_seed(5)
    init = torch.randn(shape, generator=gen).to(dtype)
    a, b = torch.nn.Parameter(view(init.clone())), torch.nn.Parameter(view(init.clone()))
    assert not a.is_contiguous()
    reference = getattr(torch.optim, name)([a], foreach=False, **flags)
    optimizer = getattr(okt, name)([b], **flags)
    for step in range(4):
        g = torch.randn(a.shape, generator=gen).to(dtype)
        a.grad = torch.empty_like(a).copy_(g) if alike else g
        b.grad = a.grad.clone(memory_format=torch.preserve_format)
        reference.step()
        optimizer.step()
        assert optimizer.backend_for(b) == "optkernels"
        assert _same_half(a, b), f"step {step + 1}: parameter"
        for key, value in reference.state[a].items():
            if value.dim():
                assert _same_half(value, optimizer.state[b][key]), f"step {step + 1}: {key}"


def test_strided_half_rows_split_by_torchs_threads_go_to_torch():
    """A permuted bfloat16 parameter whose rows of 151 elements torch's two threads split (34,881 elements:
    chunks of 17,441) keeps torch's bits through torch's own step, and says so."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        gen = torch.Generator().manual_seed(6)
        init = torch.randn(7, 33, 151, generator=gen).to(BF16)
        a = torch.nn.Parameter(init.clone().permute(1, 0, 2))
        b = torch.nn.Parameter(init.clone().permute(1, 0, 2))
        reference = torch.optim.Adam([a], foreach=False, weight_decay=0.1)
        optimizer = okt.Adam([b], weight_decay=0.1)
        g = torch.randn(a.shape, generator=gen).to(BF16)
        a.grad, b.grad = g, g.clone()
        assert optimizer.backend_for(b) == "torch"
        reference.step()
        with pytest.warns(UserWarning, match="split by torch's threads"):
            optimizer.step()
        assert _same_half(a, b) and _same_half(reference.state[a]["exp_avg"], optimizer.state[b]["exp_avg"])
    finally:
        torch.set_num_threads(before)
