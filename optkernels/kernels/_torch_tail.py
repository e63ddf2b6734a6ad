"""Where torch's CPU loop over a float16/bfloat16 tensor runs one element at a time (its scalar tail).

torch splits a tensor's ``n`` elements into threads' chunks (``at::parallel_for``: ``min(threads, ⌈n /
32768⌉)`` threads, chunks of ``⌈n / that⌉``) and runs each chunk as vectors of ``width`` elements, then the
last ``chunk length mod width`` one at a time. Some operations round differently there (``add(alpha=)``:
see :func:`optkernels.kernels.torch_rules.torch_add_alpha`), so an element function that reproduces torch
needs to know, per element, whether it lies in such a tail. :func:`torch_tail_scalars` describes the tails
by three integers, and :func:`torch_tail` tests an index against them without an integer division, in
32-bit lanes where the tensor has fewer than 2³⁰ elements, so that the element loop keeps its full vector
width.
"""

from __future__ import annotations

import ast
from typing import Any

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload

from ._lowp import HALF_MARKERS

#: torch's ``at::internal::GRAIN_SIZE``: fewer elements than this per thread are not split further.
GRAIN = 32768


def torch_tail(i: int, tail_from: Any, chunk: Any, chunk_tail: Any, like: Any) -> bool:
    """True where element ``i`` of a half tensor lies in the scalar tail of torch's CPU loop, described by
    :func:`torch_tail_scalars`: ``i ≥ tail_from`` (the last chunk's tail) or ``(i + chunk_tail) mod chunk <
    chunk_tail`` (the last ``chunk_tail`` elements of a whole chunk). Always False for a float32/float64
    ``like`` (and from Python).

    Parameters
    ----------
    i : int
        The element's index (below 2³⁰ where the other three are int32).
    tail_from, chunk, chunk_tail : int
        :func:`torch_tail_scalars`'s values, all int32 or all int64.
    like : array or marker
        The array the element belongs to (see :func:`optkernels.kernels._lowp.rounded_as`).
    """
    return False


def _tail_codegen(context, builder, signature, args):
    """``i ≥ tail_from or (i + r) mod chunk < r`` in the scalars' integer width: the quotient by a float
    multiplication (float32 for int32, float64 for int64), off by at most one since ``(i + r)/chunk`` is
    below torch's thread count + 1, then corrected by two comparisons."""
    i, tail_from, chunk, r = args
    itype = tail_from.type
    ftype = ir.FloatType() if itype.width == 32 else ir.DoubleType()
    width = signature.args[0].bitwidth
    if width > itype.width:
        i = builder.trunc(i, itype)
    elif width < itype.width:
        i = builder.zext(i, itype)
    u = builder.add(i, r)
    inverse = builder.fdiv(ir.Constant(ftype, 1.0), builder.sitofp(chunk, ftype))  # hoisted out of the loop
    k = builder.fptosi(builder.fmul(builder.sitofp(u, ftype), inverse), itype)
    rem = builder.sub(u, builder.mul(k, chunk))
    rem = builder.select(builder.icmp_signed("<", rem, ir.Constant(itype, 0)), builder.add(rem, chunk), rem)
    rem = builder.select(builder.icmp_signed(">=", rem, chunk), builder.sub(rem, chunk), rem)
    inside = builder.icmp_signed("<", rem, r)
    return builder.or_(builder.icmp_signed(">=", i, tail_from), inside)


@intrinsic
def _tail(typingctx, i, tail_from, chunk, chunk_tail):
    scalars = (tail_from, chunk, chunk_tail)
    if not (
        isinstance(i, types.Integer)
        and all(isinstance(s, types.Integer) and s.signed and s.bitwidth in (32, 64) for s in scalars)
        and len({s.bitwidth for s in scalars}) == 1
    ):
        return None
    return types.boolean(i, tail_from, chunk, chunk_tail), _tail_codegen


@overload(torch_tail, jit_options=dict(error_model="numpy", fastmath=False))
def _torch_tail_compiled(i, tail_from, chunk, chunk_tail, like):
    if like in HALF_MARKERS:
        return lambda i, tail_from, chunk, chunk_tail, like: _tail(i, tail_from, chunk, chunk_tail)
    return lambda i, tail_from, chunk, chunk_tail, like: False


#: The last scalars ``(tail_from, chunk, chunk_tail)`` of the element functions that take
#: :func:`torch_tail`'s where no tail is wanted (float32/float64 arrays, or a kernel called directly):
#: no element is in a tail.
NO_TAIL = (np.int64(2**62), np.int64(1), np.int64(0))


def torch_tail_scalars(n: int, threads: int, width: int) -> tuple:
    """``(tail_from, chunk, chunk_tail)`` of :func:`torch_tail` for a tensor of ``n`` elements stepped by
    torch with ``threads`` threads (``torch.get_num_threads()``) and half vectors of ``width`` elements (a
    power of two): torch uses ``min(threads, ⌈n / 32768⌉)`` threads, in chunks of ``⌈n / that⌉``;
    ``chunk_tail`` is a whole chunk's tail length, ``tail_from`` the first element of the last chunk's
    tail. int32 where their arithmetic fits (``n + width < 2³⁰``), else int64.

    Parameters
    ----------
    n : int
        The tensor's number of elements.
    threads : int
        torch's thread count.
    width : int
        Elements per vector of torch's half loops (32 with AVX-512, 16 with AVX2).
    """
    if width < 1 or width & (width - 1):
        raise ValueError(f"width must be a power of two, got {width}")
    used = max(1, min(threads, -(-n // GRAIN)))
    chunk = max(1, -(-n // used))
    last_start = (max(n, 1) - 1) // chunk * chunk
    tail_from = n - ((n - last_start) & (width - 1))
    kind = np.int32 if n + width < 2**30 else np.int64
    return kind(tail_from), kind(chunk), kind(chunk & (width - 1))


def strided_tail_scalars(
    shape: tuple, grad_strides: tuple, param_strides: tuple, kernel_strides: tuple, threads: int, width: int
) -> tuple | None:
    """:func:`torch_tail_scalars` of torch's ``grad.add(param, alpha=a)`` on half tensors laid out unlike
    each other (a transposed parameter with a contiguous gradient, a sliced parameter), indexed as a kernel
    that walks ``kernel_strides``' memory order; None where :func:`torch_tail` cannot describe them.

    torch's TensorIterator orders the dimensions by the gradient's strides (then the parameter's), merges
    those contiguous in both, and vectorises the innermost merged run only where both have stride 1 there:
    otherwise every element runs in the scalar loop (``tail_from = 0``); else each run of ``C`` elements
    has its own tail of ``C mod width``, which :func:`torch_tail` describes where the kernel's order holds
    the same runs at multiples of ``C`` and torch's thread chunks do not split them. Sizes-1 dimensions
    are ignored, as torch ignores them.

    Parameters
    ----------
    shape : tuple of int
        The tensors' shape.
    grad_strides, param_strides, kernel_strides : tuple of int
        Strides in elements: the gradient's, the parameter's, and those of the memory the kernel updates
        (the parameter's own where it is dense, contiguous ones for a contiguous working copy).
    threads, width : int
        As for :func:`torch_tail_scalars`.
    """
    n = 1
    for size in shape:
        n *= size
    dims = sorted(
        (d for d in range(len(shape)) if shape[d] != 1), key=lambda d: (grad_strides[d], param_strides[d])
    )
    if not dims or all(grad_strides[d] == param_strides[d] == kernel_strides[d] for d in dims):
        return torch_tail_scalars(n, threads, width)
    kind = np.int32 if n < 2**22 else np.int64  # (i + r) / chunk stays exact enough in float32 below 2²²
    if grad_strides[dims[0]] != 1 or param_strides[dims[0]] != 1:
        return kind(0), kind(1), kind(0)  # no vector loop: every element runs in the scalar loop
    run = shape[dims[0]]
    for d in dims[1:]:
        if not all(s[d] == run for s in (grad_strides, param_strides)):
            break
        run *= shape[d]
    expected = 1
    for d in dims:  # the kernel's memory holds the runs at multiples of ``run``
        if expected >= run:
            break
        if kernel_strides[d] != expected:
            return None
        expected *= shape[d]
    used = max(1, min(threads, -(-n // GRAIN)))
    if used > 1 and -(-n // used) % run:
        return None
    return kind(n), kind(run), kind(run & (width - 1))


def tail_variants(element_source: str, index: str) -> tuple[str, str, tuple[str, str, str]] | None:
    """The vector-body and scalar-tail variants of a fused half element function's source (see
    :func:`optkernels.kernels._lowp.fused_element`): its call ``torch_tail(index, a, b, c, like)`` replaced
    by ``False`` and by ``True``, the functions renamed ``<name>_body`` and ``<name>_tail``; with the names
    ``(a, b, c)`` of :func:`torch_tail_scalars`' three arguments. None where the function makes no such call
    on a half array (``like`` a fused function's half marker), or makes more than one.

    A loop that runs the body variant over the elements outside torch's tails and the tail variant over
    those inside computes the same values as the original over all of them, without the per-element test.
    """
    func = ast.parse(element_source).body[0]
    if not isinstance(func, ast.FunctionDef):
        return None
    calls = [
        node
        for node in ast.walk(func)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "torch_tail"
    ]
    if len(calls) != 1:
        return None
    names = [arg.id for arg in calls[0].args if isinstance(arg, ast.Name)]
    if not (len(names) == len(calls[0].args) == 5 and names[0] == index and names[4].startswith("_like_")):
        return None
    a, b, c = names[1:4]
    if not {a, b, c} <= {arg.arg for arg in func.args.args}:
        return None
    body, tail = (
        _with_tail(element_source, value, suffix) for value, suffix in ((False, "_body"), (True, "_tail"))
    )
    return body, tail, (a, b, c)


class _TailConstant(ast.NodeTransformer):
    """Replace every ``torch_tail(...)`` call by the constant ``value``."""

    def __init__(self, value: bool):
        self.value = value

    def visit_Call(self, node: ast.Call) -> ast.AST:
        if isinstance(node.func, ast.Name) and node.func.id == "torch_tail":
            return ast.copy_location(ast.Constant(self.value), node)
        return self.generic_visit(node)


def _with_tail(element_source: str, value: bool, suffix: str) -> str:
    """``element_source`` with its ``torch_tail`` call replaced by ``value``, its function renamed."""
    tree = _TailConstant(value).visit(ast.parse(element_source))
    func = tree.body[0]
    assert isinstance(func, ast.FunctionDef)  # checked by tail_variants
    func.name += suffix
    return ast.unparse(ast.fix_missing_locations(tree))
