"""A table of torch's bfloat16 Adam denominators, read in place of computing them.

In torch's single-tensor Adam step on a bfloat16 tensor, ``denom = (exp_avg_sq.sqrt() / c).add_(eps)``
rounds the root, the quotient and the sum to bfloat16 (three roundings, a square root and a division by the
step's constant ``c = bias_correction2**0.5``): a function of the bfloat16 ``v`` alone for one step's ``c``
and ``eps``, and ``v`` takes 65536 bit patterns. A :class:`DenominatorTable` holds that function's value for
every pattern (bfloat16 bits, one uint16 each, built by :func:`.torch_rules.adam_denominator_table` with the
same element code as the loop's); :func:`denominator_at` reads the entry of a ``v`` in a compiled loop (an
unaligned 32-bit load whose high half is the entry: vectorised, a gather, with no conversion). The same bits
as the computation, at any ``v`` (NaN, infinities, negatives included); worth it where a step's elements far
outnumber the table's.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import NativeValue, intrinsic, models, register_model, typeof_impl, unbox

__all__ = ["DenominatorTable", "DenominatorTableType", "denominator_at"]


class DenominatorTableType(types.Type):
    """Numba's type of a :class:`DenominatorTable`: the address of its entry 0, an int64 in compiled code."""

    def __init__(self) -> None:
        super().__init__("DenominatorTable")


TABLE_TYPE = DenominatorTableType()


class DenominatorTable(int):
    """The address (an int) of entry 0 of a table of 65536 uint16 entries, entry ``k`` the bfloat16 bits of
    the denominator of ``v`` with bits ``k``. The memory is the caller's (``buffer``, kept alive here): a
    uint16 array whose element 0 lies before entry 0 (:func:`denominator_at` reads it with entry 0)."""

    #: Numba's dispatcher reads the type here (no call of typeof in Python).
    _numba_type_ = TABLE_TYPE
    buffer: Any

    def __new__(cls, buffer: Any) -> DenominatorTable:
        if buffer.dtype.itemsize != 2 or buffer.size != 65537 or not buffer.flags.c_contiguous:
            raise ValueError("a denominator table's buffer holds 65537 contiguous 16-bit entries")
        table = super().__new__(cls, buffer.ctypes.data + 2)
        table.buffer = buffer
        return table


@typeof_impl.register(DenominatorTable)
def _typeof_table(value: DenominatorTable, context: Any) -> DenominatorTableType:
    return TABLE_TYPE


@register_model(DenominatorTableType)
class _TableModel(models.PrimitiveModel):
    def __init__(self, dmm: Any, fe_type: Any) -> None:
        super().__init__(dmm, fe_type, ir.IntType(64))


@unbox(DenominatorTableType)
def _unbox_table(typ: DenominatorTableType, obj: Any, c: Any) -> NativeValue:
    address = c.pyapi.long_as_longlong(obj)
    failed = cgutils.is_not_null(c.builder, c.pyapi.err_occurred())
    return NativeValue(address, is_error=failed)


@intrinsic
def denominator_at(typingctx, table, v):
    """The float32 value of the table's entry for float32 ``v`` (a bfloat16 value: its low 16 bits zero),
    entry ``bits(v) >> 16``, read as the high half of the 32-bit word at ``address − 2 + 2·entry`` (njit only)."""
    if not (isinstance(table, DenominatorTableType) and v == types.float32):
        return None

    def codegen(context, builder, signature, args):
        i32, i64 = ir.IntType(32), ir.IntType(64)
        entry = builder.zext(builder.lshr(builder.bitcast(args[1], i32), ir.Constant(i32, 16)), i64)
        before = builder.inttoptr(builder.sub(args[0], ir.Constant(i64, 2)), ir.IntType(16).as_pointer())
        pointer = builder.bitcast(builder.gep(before, [entry]), i32.as_pointer())  # 32-bit gather indices
        word = builder.load(pointer, align=2)
        return builder.bitcast(builder.and_(word, ir.Constant(i32, 0xFFFF0000)), ir.FloatType())

    return types.float32(table, v), codegen
