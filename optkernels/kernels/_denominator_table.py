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

:class:`PartTables` holds one such table per part of a launch (one per thread): the launch's loop fills its
part's table itself, on the thread that reads it (:func:`.torch_rules.part_denominators`), where the
step's constants differ from those the table was filled for; each row (:data:`ROW_WORDS` uint16 words) is
a header of :data:`HEADER_WORDS` words (:data:`KEY` int64 fields), then the table's word before entry 0,
then its 65536 entries.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import NativeValue, intrinsic, models, register_model, typeof_impl, unbox

from ._intrinsics import zen_target

__all__ = [
    "DenominatorTable",
    "DenominatorTableType",
    "PartTables",
    "PartTablesType",
    "denominator_at",
    "tables_pay",
]


def tables_pay(cpu_name: str | None = None) -> bool:
    """Whether reading the denominators from a table is faster than computing them on the processor that
    Numba compiles for (``cpu_name``: LLVM's name of it; by default ``NUMBA_CPU_NAME`` or the host's).
    Not on AMD's Zen cores (``znver*``): there a table's reads (vector gathers) cost more than the root,
    the division and the roundings they replace, even with the table filled once (bench/results/
    target-notes.md); on the Intel cores measured they cost less."""
    return not zen_target(cpu_name)


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


class _AddressModel(models.PrimitiveModel):
    """Numba's data model of an address type: an int64."""

    def __init__(self, dmm: Any, fe_type: Any) -> None:
        super().__init__(dmm, fe_type, ir.IntType(64))


def _unbox_address(typ: Any, obj: Any, c: Any) -> NativeValue:
    address = c.pyapi.long_as_longlong(obj)
    failed = cgutils.is_not_null(c.builder, c.pyapi.err_occurred())
    return NativeValue(address, is_error=failed)


def _register_address_type(cls: type, numba_type: types.Type) -> None:
    """``cls`` (an ``int`` subclass: an address) passed to compiled code as ``numba_type``, an int64."""
    typeof_impl.register(cls)(lambda value, context: numba_type)
    register_model(type(numba_type))(_AddressModel)
    unbox(type(numba_type))(_unbox_address)


_register_address_type(DenominatorTable, TABLE_TYPE)


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


#: A :class:`PartTables` row: its header's int64 fields (``FILLED``: 0, or the kind of the filled table's
#: quotient; the three constants' bits; whether the negative half is filled; the roots' address; the
#: number of rows).
KEY = {"FILLED": 0, "BC2": 1, "INV": 2, "EPS": 3, "NEGATIVE": 4, "ROOTS": 5, "ROWS": 6}
#: uint16 words of a row's header (64 bytes), then the word before entry 0 (the high half of that 32-bit
#: load is never used), then the 65536 entries, the row padded to whole cache lines (128 bytes apart
#: from the next one's start: different sets of the caches' ways).
HEADER_WORDS = 32
ROW_WORDS = HEADER_WORDS + 65536 + 64


class PartTablesType(types.Type):
    """Numba's type of a :class:`PartTables`: the address of its row 0, an int64 in compiled code."""

    def __init__(self) -> None:
        super().__init__("PartTables")


PART_TABLES_TYPE = PartTablesType()


class PartTables(int):
    """The address (an int) of row 0 of ``rows`` rows of :data:`ROW_WORDS` uint16 words, one table of
    denominators per part of a launch: part ``p`` uses row ``p mod rows`` (the launches given it have at
    most ``rows`` parts, at most one per thread: one row per part; the parts of a serial call run one
    after the other). The memory is ``buffer``'s (kept alive here, written only by the
    launches given this object, one at a time: its owner's lock); ``roots``: the roots of the 65536 patterns
    (read only), whose address each row's header holds."""

    _numba_type_ = PART_TABLES_TYPE
    buffer: Any
    roots: Any
    rows: int

    def __new__(cls, rows: int, roots: Any) -> PartTables:
        import numpy as np

        if rows < 1:
            raise ValueError(f"rows: at least 1, got {rows}")
        if roots.dtype.itemsize != 2 or roots.size != 65536 or not roots.flags.c_contiguous:
            raise ValueError("roots: 65536 contiguous 16-bit entries")
        buffer = np.zeros((rows, ROW_WORDS), np.uint16)
        header = buffer[:, :HEADER_WORDS].view(np.int64)
        header[:, KEY["ROOTS"]] = roots.ctypes.data
        header[:, KEY["ROWS"]] = rows
        tables = super().__new__(cls, buffer.ctypes.data)
        tables.buffer, tables.roots, tables.rows = buffer, roots, rows
        return tables


_register_address_type(PartTables, PART_TABLES_TYPE)


@intrinsic
def as_address(typingctx, value):
    """The int64 address a :class:`DenominatorTable` or :class:`PartTables` is (njit only)."""
    if not isinstance(value, (DenominatorTableType, PartTablesType)):
        return None
    return types.int64(value), lambda context, builder, signature, args: args[0]


@intrinsic
def table_at(typingctx, address):
    """The :class:`DenominatorTable` (its Numba type) whose entry 0 is at the int64 ``address`` (njit only)."""
    if not isinstance(address, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        return context.cast(builder, args[0], signature.args[0], types.int64)

    return TABLE_TYPE(address), codegen


@intrinsic
def float_bits(typingctx, x):
    """The bits of a float32 (sign-extended) or float64 ``x`` as an int64; 0 for None (njit only)."""
    if x == types.float32:

        def codegen(context, builder, signature, args):
            return builder.sext(builder.bitcast(args[0], ir.IntType(32)), ir.IntType(64))

    elif x == types.float64:

        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], ir.IntType(64))

    elif isinstance(x, (types.NoneType, types.Omitted)) or x is types.none:

        def codegen(context, builder, signature, args):
            return ir.Constant(ir.IntType(64), 0)

    else:
        return None
    return types.int64(x), codegen
