"""The speed targets of the benchmark issue, checked against one run's measurements."""
from __future__ import annotations

from harness import Row


def _find(rows: list[Row], case: str, impl: str, n: int = 0) -> Row | None:
    for r in rows:
        if r.case == case and r.impl == impl and (not n or r.n == n):
            return r
    return None


def _limit(rows: list[Row], n: int) -> Row | None:
    return _find(rows, "Adam-shaped memory kernel", "limit", n)


#: Where the known reasons for a MISSED target are written, beside the figures (not in code).
NOTES = "bench/results/target-notes.md"


def check_targets(rows: list[Row]) -> list[str]:
    """One line per target: the measured ratio and MET / MISSED (or 'not measured'); a MISSED line points to
    the notes on why a target can be missed (:data:`NOTES`)."""
    return [f"{line} (see {NOTES})" if "MISSED" in line else line for line in _check_targets(rows)]


def _check_targets(rows: list[Row]) -> list[str]:
    out: list[str] = []

    def verdict(ok: bool) -> str:
        return "MET" if ok else "MISSED"

    adam8, limit8 = _find(rows, "apply_adam", "optkernels", int(1e8)), _limit(rows, int(1e8))
    if adam8 and limit8:
        frac = limit8.seconds / adam8.seconds
        out.append(f"apply_adam N=1e8 at >= 95% of the Adam-shaped limit: {100 * frac:.1f}% ({verdict(frac >= 0.95)})")
        torch8 = _find(rows, "apply_adam", "torch Adam(fused=True)", int(1e8))
        if torch8:
            ratio = torch8.seconds / adam8.seconds
            out.append(f"apply_adam N=1e8 not slower than torch fused: {ratio:.2f}x torch's speed "
                       f"({verdict(ratio >= 1.0)})")
    else:
        out.append("apply_adam N=1e8: not measured in this run")
    adam5, torch5 = _find(rows, "apply_adam", "optkernels", int(1e5)), _find(rows, "apply_adam",
                                                                             "torch Adam(fused=True)", int(1e5))
    if adam5 and torch5:
        ratio = torch5.seconds / adam5.seconds
        out.append(f"apply_adam N=1e5 >= 2x faster than torch fused: {ratio:.2f}x ({verdict(ratio >= 2.0)})")
    else:
        out.append("apply_adam N=1e5 vs torch fused: not measured (needs torch)")
    ftrl8, tf8 = _find(rows, "apply_ftrl", "optkernels", int(1e8)), _find(rows, "apply_ftrl",
                                                                          "tensorflow raw apply_ftrl", int(1e8))
    if ftrl8 and tf8:
        ratio = tf8.seconds / ftrl8.seconds
        out.append(f"apply_ftrl N=1e8 >= 2.2x faster than TensorFlow's ApplyFtrl: {ratio:.2f}x "
                   f"({verdict(ratio >= 2.2)})")
    else:
        out.append("apply_ftrl N=1e8 vs TensorFlow: not measured (needs tensorflow and N=1e8)")
    case = "Adam step, 100 tensors"
    model6 = _find(rows, case, "optkernels Adam", int(1e6))
    torch6 = _find(rows, case, "torch Adam(fused=True)", int(1e6))
    if model6 and torch6:
        ratio = torch6.seconds / model6.seconds
        out.append(f"Adam class, 100 tensors totalling 1e6, >= 2x faster than torch fused: {ratio:.2f}x "
                   f"({verdict(ratio >= 2.0)})")
    else:
        out.append("Adam class, 100 tensors totalling 1e6, vs torch fused: not measured (needs torch)")
    model7 = _find(rows, case, "optkernels Adam", int(1e7))
    one7 = _find(rows, case, "apply_adam, one tensor", int(1e7))
    if model7 and one7:
        ratio = model7.seconds / one7.seconds
        out.append(f"Adam class, 100 tensors totalling 1e7, within 1.15x of one apply_adam over 1e7: "
                   f"{ratio:.2f}x ({verdict(ratio <= 1.15)})")
    else:
        out.append("Adam class, 100 tensors totalling 1e7: not measured in this run")
    sparse = {r.impl: r for r in rows if r.group == "sparse"}
    for ours_name, theirs_name, factor in (
            ("optkernels fused_sparse_lazy_adam", "torch SparseAdam", 8.0),
            ("optkernels fused_sparse_ftrl", "tensorflow sparse FTRL (merged)", 6.0),
            ("optkernels fused_sparse_proximal_adagrad", "tensorflow sparse ProximalAdagrad (merged)", 6.0)):
        ours, theirs = sparse.get(ours_name), sparse.get(theirs_name)
        if ours and theirs:
            ratio = theirs.seconds / ours.seconds
            out.append(f"{ours_name} >= {factor:g}x faster than {theirs_name}: {ratio:.2f}x "
                       f"({verdict(ratio >= factor)})")
        else:
            out.append(f"{ours_name} vs {theirs_name}: not measured")
    gpu8 = _find(rows, "apply_adam (GPU)", "optkernels", int(1e8))
    copy8 = _find(rows, "device copy", "copy bandwidth", int(1e8))
    if gpu8 and copy8:
        frac = gpu8.gbs / copy8.gbs
        out.append(f"GPU apply_adam N=1e8 at >= 85% of the device's copy bandwidth: {100 * frac:.1f}% "
                   f"({verdict(frac >= 0.85)})")
        torch_gpu8 = _find(rows, "apply_adam (GPU)", "torch Adam(fused=True, cuda)", int(1e8))
        if torch_gpu8:
            ratio = torch_gpu8.seconds / gpu8.seconds
            out.append(f"GPU apply_adam N=1e8 not slower than torch fused CUDA Adam: {ratio:.2f}x torch's speed "
                       f"({verdict(ratio >= 1.0)})")
    else:
        out.append("GPU apply_adam N=1e8: not measured (no CUDA device in this run)")
    out += _torch_targets(rows, verdict)
    out += _torch_class_targets(rows, verdict)
    out += _deepspeed_targets(rows, verdict)
    imp = _find(rows, "import optkernels", "optkernels")
    if imp:
        out.append(f"import optkernels < 0.3 s: {imp.seconds:.3f} s ({verdict(imp.seconds < 0.3)})")
    first = _find(rows, "apply_adam first call", "warm Numba cache")
    if first:
        out.append(f"apply_adam first call with a warm cache < 0.5 s: {first.seconds:.3f} s "
                   f"({verdict(first.seconds < 0.5)})")
    if any(r.group == "modern" for r in rows):
        from modern import targets as modern_targets

        out += modern_targets(rows, verdict)
    if any(r.group == "lowbit" for r in rows):
        from lowbit import rowwise_targets, step_targets

        out += step_targets(rows, verdict)
        out += rowwise_targets(rows, verdict)
    return out


def _torch_targets(rows: list[Row], verdict) -> list[str]:
    """optkernels.torch.Adam on the 101-tensor transformers: >= 1.5x torch's fastest CPU Adam, and within
    1.05x of the NumPy Adam class over the same memory (per model size)."""
    case = "Adam step, torch transformer (101 tensors)"
    sizes = sorted({r.n for r in rows if r.case == case and r.impl == "optkernels.torch.Adam"})
    if not sizes:
        return ["optkernels.torch.Adam on the transformer: not measured (needs torch; group 'torch')"]
    out = []
    for n in sizes:
        ours = _find(rows, case, "optkernels.torch.Adam", n)
        torch_rows = [r for r in rows if r.case == case and r.n == n and r.impl.startswith("torch Adam(")
                      and "cuda" not in r.impl]
        if torch_rows:
            fastest = min(torch_rows, key=lambda r: r.seconds)
            ratio = fastest.seconds / ours.seconds
            limit = _find(rows, case, "Adam-shaped memory kernel (same bytes)", n)
            share = (f"; ours at {100 * limit.seconds / ours.seconds:.0f}% of the memory kernel's speed"
                     if limit else "")
            out.append(f"optkernels.torch.Adam, transformer of {n:.2e} elements, >= 1.5x faster than torch's "
                       f"fastest CPU Adam ({fastest.impl}): {ratio:.2f}x{share} ({verdict(ratio >= 1.5)})")
        numpy_class = _find(rows, case, "optkernels.optimizers.Adam (NumPy views)", n)
        if numpy_class:
            ratio = ours.seconds / numpy_class.seconds
            out.append(f"optkernels.torch.Adam, transformer of {n:.2e} elements, within 1.05x of the NumPy "
                       f"Adam class: {ratio:.3f}x ({verdict(ratio <= 1.05)})")
    return out


def _torch_class_targets(rows: list[Row], verdict) -> list[str]:
    """Every optkernels.torch class bearing a torch.optim name, per transformer size: >= 1.5x torch's fastest
    CPU path for that class (fused, foreach or for-loop: medians of the group's interleaved rounds)."""
    from torch_classes import CASE, CLASSES, impl_name, torch_paths

    out = []
    for label in CLASSES:
        ours_rows = [r for r in rows if r.case == CASE and r.impl == impl_name(label, None)]
        for ours in ours_rows:
            names = {impl_name(label, path) for path in torch_paths(CLASSES[label][0])}
            theirs = [r for r in rows if r.case == CASE and r.n == ours.n and r.note == ours.note
                      and r.impl in names]
            if not theirs:
                continue
            fastest = min(theirs, key=lambda r: r.seconds)
            ratio = fastest.seconds / ours.seconds
            out.append(f"optkernels.torch.{label}, {ours.note.split(',')[0]} transformer ({ours.n:.2e} elements "
                       f"stepped), >= 1.5x faster than torch's fastest CPU path ({fastest.impl}): {ratio:.2f}x "
                       f"({verdict(ratio >= 1.5)})")
    if not out:
        out.append("optkernels.torch classes vs torch's paths: not measured (needs torch; group 'torch')")
    return out


#: The rows of bench/cpu_adam.py held to DeepSpeed's CPUAdam speed.
OURS_VS_DEEPSPEED = ("apply_adam", "optkernels.torch.Adam", "optkernels.torch.Adam(fused=True)")


def _deepspeed_targets(rows: list[Row], verdict) -> list[str]:
    """apply_adam and optkernels.torch.Adam (default and ``fused=True``) at or above DeepSpeed's CPUAdam, per dtype and N (each N of the
    run, 1e4 to 1e8 in a full one): the paired ratio where the row has one."""
    out = []
    for dtype in ("float32", "bfloat16"):
        case = f"Adam step vs DeepSpeed CPUAdam, {dtype}"
        anchors = {r.n: r for r in rows if r.case == case and r.impl == "DeepSpeed CPUAdam"}
        if not anchors:
            out.append(f"host Adam vs DeepSpeed CPUAdam, {dtype}: not measured (needs deepspeed)")
            continue
        for r in rows:
            if r.case == case and r.impl in OURS_VS_DEEPSPEED and r.n in anchors:
                ratio = r.paired or anchors[r.n].seconds / r.seconds
                how = "paired, " if r.paired else ""
                out.append(f"{r.impl} {dtype} N={r.n:.0e} at or above DeepSpeed CPUAdam: {ratio:.3f}x its "
                           f"speed ({how}{verdict(ratio >= 1.0)})")
    return out
