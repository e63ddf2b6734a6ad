"""Two bfloat16 elements per 32-bit word: the vector body of the fused all-bfloat16 CPU loops.

A fused element function (:func:`._lowp.fused_element`) widens each bfloat16 element it reads into a
float32 (``bits << 16``) and narrows each one it writes (rounded, the high 16 bits). Vectorised one element
per lane, each read costs a widening load (``vpmovzxwd``: a shuffle) and a shift, each write a shift and a
narrowing (``vpmovdw``: two shuffles). :func:`paired_source` rewrites the element function's vector-body
variant to update two neighbouring elements ``i`` (even) and ``i + 1`` from one 32-bit word per array: the
low half widened by a shift (``w << 16``), the high half by a mask (``w & 0xFFFF0000``), the function's
statements run once for each, and the two results packed back into one word, ``(a >> 16) | (b &
0xFFFF0000)``. Every element is computed by the same statements on the same values as before: only the
lanes that hold them change (the even elements in one vector, the odd ones in another), so the bits are the
same, with a third of the conversion work and no shuffle.
"""

from __future__ import annotations

import ast

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

__all__: list[str] = []

_I32, _F32 = ir.IntType(32), ir.FloatType()
_HIGH = 0xFFFF0000


def _word_pointer(context, builder, array_type, array, index, index_type):
    """``&array[index]`` (a 1-D uint16 array) as a pointer to a 32-bit word."""
    data = context.make_array(array_type)(context, builder, array)
    i = context.cast(builder, index, index_type, types.intp)
    pointer = cgutils.get_item_pointer(context, builder, array_type, data, [i], wraparound=False)
    return builder.bitcast(pointer, _I32.as_pointer())


def _pair_array(array, index) -> bool:
    return (
        isinstance(array, types.Array)
        and array.ndim == 1
        and array.dtype == types.uint16
        and isinstance(index, types.Integer)
    )


@intrinsic
def _load_pair(typingctx, array, index):
    """The 32-bit word of elements ``index`` (low half) and ``index + 1`` (high half) of a uint16 array."""
    if not _pair_array(array, index):
        return None

    def codegen(context, builder, signature, args):
        pointer = _word_pointer(context, builder, signature.args[0], args[0], args[1], signature.args[1])
        return builder.load(pointer, align=2)

    return types.uint32(array, index), codegen


def _constant(value: int) -> ir.Constant:
    return ir.Constant(_I32, value)


@intrinsic
def _low_bf16(typingctx, word):
    """The float32 value of the bfloat16 in the low half of ``word`` (exact)."""
    if word != types.uint32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(builder.shl(args[0], _constant(16)), _F32)

    return types.float32(word), codegen


@intrinsic
def _high_bf16(typingctx, word):
    """The float32 value of the bfloat16 in the high half of ``word`` (exact)."""
    if word != types.uint32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(builder.and_(args[0], _constant(_HIGH)), _F32)

    return types.float32(word), codegen


def _rounded_bits(builder, x, keep_nan: bool):
    """The bits of float32 ``x`` with the bfloat16 nearest it (ties to even) in their high half, as
    ``_lowp``'s conversions round: without a NaN step where ``keep_nan`` (``_lowp._ir_f32_to_bf16_keeping_nan``),
    else a NaN first made the quiet NaN of its sign (``_lowp._ir_f32_to_bf16``)."""
    b = builder.bitcast(x, _I32)
    if not keep_nan:
        quiet = builder.and_(builder.or_(b, _constant(0x00400000)), _constant(0xFFC00000))
        b = builder.select(builder.fcmp_unordered("uno", x, x), quiet, b)
    odd = builder.icmp_unsigned("!=", builder.and_(b, _constant(0x10000)), _constant(0))
    return builder.add(b, builder.select(odd, _constant(0x8000), _constant(0x7FFF)))


def _store_pair_intrinsic(keep_nan: bool):
    @intrinsic
    def store_pair(typingctx, array, index, low, high):
        if not (_pair_array(array, index) and low == high == types.float32):
            return None

        def codegen(context, builder, signature, args):
            pointer = _word_pointer(context, builder, signature.args[0], args[0], args[1], signature.args[1])
            low_bits = builder.lshr(_rounded_bits(builder, args[2], keep_nan), _constant(16))
            high_bits = builder.and_(_rounded_bits(builder, args[3], keep_nan), _constant(_HIGH))
            builder.store(builder.or_(low_bits, high_bits), pointer, align=2)
            return context.get_dummy_value()

        return types.void(array, index, low, high), codegen

    return store_pair


#: The names a paired element function's source uses (see :func:`paired_source`).
NAMES = {
    "_load_pair": _load_pair,
    "_low_bf16": _low_bf16,
    "_high_bf16": _high_bf16,
    "_store_pair": _store_pair_intrinsic(False),
    "_store_pair_keeping_nan": _store_pair_intrinsic(True),
}

_LOADS = {"_load_bf16"}
_STORES = {"_store_bf16": "_store_pair", "_store_bf16_keeping_nan": "_store_pair_keeping_nan"}


class _Rename(ast.NodeTransformer):
    """Every name in ``names`` gets ``suffix``."""

    def __init__(self, names: set, suffix: str):
        self.names, self.suffix = names, suffix

    def visit_Name(self, node):
        if node.id in self.names:
            return ast.copy_location(ast.Name(node.id + self.suffix, node.ctx), node)
        return node


def _load(stmt: ast.stmt, index: str) -> tuple[str, str] | None:
    """``(local, array)`` of a fused load ``_v_p = _load_bf16(p[index])``, else None."""
    if not (
        isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
    ):
        return None
    call = stmt.value
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in _LOADS):
        return None
    item = call.args[0] if len(call.args) == 1 else None
    if not (
        isinstance(item, ast.Subscript)
        and isinstance(item.value, ast.Name)
        and isinstance(item.slice, ast.Name)
        and item.slice.id == index
    ):
        return None
    return stmt.targets[0].id, item.value.id


def _store(stmt: ast.stmt, index: str) -> tuple[str, str, str] | None:
    """``(array, store name, local)`` of a fused store ``p[index] = _store_bf16...(_v_p)``, else None."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
        return None
    target, call = stmt.targets[0], stmt.value
    if not (
        isinstance(target, ast.Subscript)
        and isinstance(target.value, ast.Name)
        and isinstance(target.slice, ast.Name)
        and target.slice.id == index
        and isinstance(call, ast.Call)
        and isinstance(call.func, ast.Name)
        and call.func.id in _STORES
        and len(call.args) == 1
        and isinstance(call.args[0], ast.Name)
    ):
        return None
    return target.value.id, call.func.id, call.args[0].id


def paired_source(body_source: str, index: str) -> tuple[str, str] | None:
    """``(name, source)`` of the paired form (see the module docstring) of a fused all-bfloat16 element
    function's vector-body variant (``body_source``, one function of index ``index``): the same parameters,
    ``index`` even, updating elements ``index`` and ``index + 1``. None where the function is not a run of
    loads, statements without a return or any other use of a half array, and stores
    (:func:`._lowp.fused_element`'s form for bfloat16 arrays only)."""
    func = ast.parse(body_source).body[0]
    if not isinstance(func, ast.FunctionDef):
        return None
    body = func.body
    loads: list[tuple[str, str]] = []
    while body and (load := _load(body[0], index)) is not None:
        loads.append(load)
        body = body[1:]
    stores: list[tuple[str, str, str]] = []
    while body and (store := _store(body[-1], index)) is not None:
        stores.insert(0, store)
        body = body[:-1]
    arrays = {array for _, array in loads}
    if not loads or any(array not in arrays for array, _, _ in stores):
        return None
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, (ast.Return, ast.Yield, ast.Global, ast.Nonlocal, ast.Lambda, ast.FunctionDef)):
            return None
        if isinstance(node, ast.Name) and (node.id in arrays or node.id == index):
            return None  # the arrays only through their loaded locals; no use of the index
    params = {a.arg for a in func.args.args}
    local = {
        node.id
        for stmt in func.body
        for node in ast.walk(stmt)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)
    } - params
    second = [_Rename(local, "__high").visit(ast.parse(ast.unparse(stmt)).body[0]) for stmt in body]
    words = [ast.parse(f"_w_{array} = _load_pair({array}, {index})").body[0] for _, array in loads]
    low = [ast.parse(f"{name} = _low_bf16(_w_{array})").body[0] for name, array in loads]
    high = [ast.parse(f"{name}__high = _high_bf16(_w_{array})").body[0] for name, array in loads]
    out = [
        ast.parse(f"{_STORES[store]}({array}, {index}, {name}, {name}__high)").body[0]
        for array, store, name in stores
    ]
    func.name += "_pair"
    func.body = words + low + list(body) + high + second + out
    return func.name, ast.unparse(ast.fix_missing_locations(func))
