"""Sums of squares of eight rows at once, each row's sum still left to right: :func:`square_sums_8`.

Row-wise Adagrad's mean of squares (LOWBIT.md §8.2) is a sequential sum over each row, so a row alone
keeps one adder busy per element; eight rows' sums side by side, one per vector lane, take one vector
multiply and one vector add per column instead of eight of each. The rows are read eight columns at a
time and transposed in registers (shuffles), so column ``c`` of the eight rows is one vector; lane ``k``
then computes ``((0 + x_k0²) + x_k1²) + ...``, each product and each sum rounded as the scalar loop
rounds them (no fused multiply-add): the same bits.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.errors import TypingError
from numba.extending import intrinsic

#: The rows summed at once (the vector lanes).
LANES = 8

_I32 = ir.IntType(32)

# Three stages of two-vector shuffles transpose 8 vectors of 8 (row k, columns c .. c + 7) into 8 vectors
# of column c + j, rows 0 .. 7: blocks of 4, then of 2, then single elements change places.
_STAGES = (
    ((0, 4), (1, 5), (2, 6), (3, 7)),
    ((0, 2), (1, 3), (4, 6), (5, 7)),
    ((0, 1), (2, 3), (4, 5), (6, 7)),
)
_MASKS = (
    ((0, 1, 2, 3, 8, 9, 10, 11), (4, 5, 6, 7, 12, 13, 14, 15)),
    ((0, 1, 8, 9, 4, 5, 12, 13), (2, 3, 10, 11, 6, 7, 14, 15)),
    ((0, 8, 2, 10, 4, 12, 6, 14), (1, 9, 3, 11, 5, 13, 7, 15)),
)


def _mask(values: tuple) -> Any:
    return ir.Constant(ir.VectorType(_I32, len(values)), list(values))


def _transpose(builder: Any, rows: list) -> list:
    """The 8 columns of the 8 vectors ``rows`` (the rows of an 8 x 8 block), as vectors."""
    v = list(rows)
    for pairs, (low, high) in zip(_STAGES, _MASKS):
        out = list(v)
        for a, b in pairs:
            out[a] = builder.shuffle_vector(v[a], v[b], _mask(low))
            out[b] = builder.shuffle_vector(v[a], v[b], _mask(high))
        v = out
    return v


def _codegen(context, builder, signature, args):
    block_type, totals_type = signature.args
    block = context.make_array(block_type)(context, builder, args[0])
    totals = context.make_array(totals_type)(context, builder, args[1])
    element = context.get_value_type(block_type.dtype)
    vector = ir.VectorType(element, LANES)
    align = context.get_abi_sizeof(element)
    row_len = cgutils.unpack_tuple(builder, block.shape, 2)[1]
    zero_index = context.get_constant(types.intp, 0)
    starts = [
        cgutils.get_item_pointer(
            context, builder, block_type, block, [context.get_constant(types.intp, k), zero_index]
        )
        for k in range(LANES)
    ]
    total = cgutils.alloca_once_value(builder, ir.Constant(vector, [0.0] * LANES))

    def add_squares(column):
        sums = builder.load(total)
        sums = builder.fadd(sums, builder.fmul(column, column))
        builder.store(sums, total)

    chunks = builder.udiv(row_len, row_len.type(LANES))
    with cgutils.for_range(builder, chunks) as loop:
        first = builder.mul(loop.index, row_len.type(LANES))
        rows = [
            builder.load(builder.bitcast(builder.gep(start, [first]), vector.as_pointer()), align=align)
            for start in starts
        ]
        for column in _transpose(builder, rows):
            add_squares(column)
    with cgutils.for_range(builder, builder.sub(row_len, builder.mul(chunks, row_len.type(LANES)))) as loop:
        c = builder.add(builder.mul(chunks, row_len.type(LANES)), loop.index)
        column = ir.Constant(vector, None)
        for k, start in enumerate(starts):
            column = builder.insert_element(column, builder.load(builder.gep(start, [c])), _I32(k))
        add_squares(column)
    sums = builder.load(total)
    for k in range(LANES):
        out = cgutils.get_item_pointer(
            context, builder, totals_type, totals, [context.get_constant(types.intp, k)], wraparound=False
        )
        builder.store(builder.extract_element(sums, _I32(k)), out)
    return context.get_dummy_value()


@intrinsic
def square_sums_8(typingctx, block, totals):
    """``totals[k] = ((0 + block[k, 0]²) + block[k, 1]²) + ...`` over each row (left to right, each
    product and sum rounded in the arrays' dtype, as a scalar loop computes it) for the 8 rows ``k < 8``
    of the C-contiguous 2-D ``block`` (at least 8 rows; float32 or float64), into the 1-D ``totals`` of
    the same dtype (at least 8 elements). Nothing checks the sizes at run time."""
    if not (
        isinstance(block, types.Array)
        and block.ndim == 2
        and block.layout == "C"
        and block.dtype in (types.float32, types.float64)
        and isinstance(totals, types.Array)
        and totals.ndim == 1
        and totals.dtype == block.dtype
    ):
        raise TypingError("square_sums_8 takes a C-contiguous 2-D float array and a 1-D array of its dtype")
    return types.void(block, totals), _codegen
