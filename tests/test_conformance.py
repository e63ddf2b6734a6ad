"""optkernels.conformance and ``python -m optkernels verify``: passes on our kernels, catches wrong ones."""
import functools
import json
import subprocess
import sys

import numpy as np
import pytest

import optkernels.kernels as K
from optkernels.conformance import vectors
from optkernels.conformance.verify import verify


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "optkernels", *args], capture_output=True, text=True, timeout=600)


def test_every_op_passes_verify_on_the_cpu():
    reports = verify("cpu", cases=2, seed=3)
    assert {r.op for r in reports} >= {"apply_adam", "apply_ftrl", "lamb", "sgd", "apply_ftrl_v2",
                                       "sparse_apply_ftrl_v2"}
    assert all(r.ok for r in reports), [f for r in reports for f in r.failures]
    assert all(r.steps == 2 * 3 for r in reports)
    assert sum(r.examples_total for r in reports) == sum(r.examples_passed for r in reports) >= 13


def test_verify_catches_a_wrong_formula(monkeypatch):
    real = K.apply_adam

    @functools.wraps(real)  # keeps the signature, whose names the cases use
    def adam_with_textbook_epsilon(var, m, v, beta1_power, beta2_power, lr, beta1, beta2, epsilon, gradient, **attrs):
        return real(var, m, v, beta1_power, beta2_power, lr, beta1, beta2, float(epsilon) * 50.0, gradient, **attrs)

    monkeypatch.setattr(K, "apply_adam", adam_with_textbook_epsilon)
    (report,) = verify("cpu", cases=2, only=["apply_adam"])
    assert not report.ok and report.worst_ulps["float64"] > 1e4


def test_verify_command_prints_the_table_and_exits_zero():
    result = _cli("verify", "--cases", "1", "--ops", "apply_adam", "apply_ftrl")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "float32 ulps" in result.stdout and "apply_ftrl" in result.stdout
    assert "2 passed, 0 failed" in result.stdout


@pytest.mark.parametrize("args, message", [(("--cases", "0"), "--cases"), (("--ops", "apply_nothing"), "apply_nothing"),
                                           (("--target", "tpu"), "invalid choice")])
def test_verify_bad_arguments_give_one_clear_line(args, message):
    result = _cli("verify", *args)
    assert result.returncode == 2
    assert message in result.stderr


def test_exported_vectors_check_out_and_catch_a_wrong_kernel(tmp_path):
    index = vectors.export(tmp_path, cases=1, seed=5, only=["apply_adam", "lars_update", "apply_ftrl"])
    data = json.loads(index.read_text())
    assert {c["op"] for c in data["cases"]} == {"apply_adam", "lars_update", "apply_ftrl"}
    assert {c["dtype"] for c in data["cases"]} == {"float32", "float64", "float16", "bfloat16"}
    assert (tmp_path / "FORMAT.md").read_text().startswith("# optkernels golden vectors")
    assert vectors.check(tmp_path) == []

    def wrong_ftrl(var, accum, linear, grad, lr, l1, l2, lr_power, **attrs):
        return K.apply_ftrl(var, accum, linear, grad, lr, l1, l2 * np.float32(1.5) + np.float32(0.01), lr_power)

    failures = vectors.check(tmp_path, {"apply_ftrl": wrong_ftrl})
    assert failures and all("apply_ftrl" in f for f in failures)


def test_ftrl_v2_vectors_check_out_and_catch_a_kernel_without_shrinkage(tmp_path):
    import optkernels.sparse as S

    vectors.export(tmp_path, cases=2, seed=11, only=["apply_ftrl_v2", "sparse_apply_ftrl_v2"])
    assert vectors.check(tmp_path) == []

    def v1_only(var, accum, linear, grad, lr, l1, l2, l2_shrinkage, lr_power, **attrs):
        return K.apply_ftrl_v2(var, accum, linear, grad, lr, l1, l2, 0.0, lr_power)

    def sparse_v1_only(var, accum, linear, grad, indices, **attrs):
        return S.sparse_apply_ftrl_v2(var, accum, linear, grad, indices, **dict(attrs, l2_shrinkage=0.0))

    failures = vectors.check(tmp_path, {"apply_ftrl_v2": v1_only, "sparse_apply_ftrl_v2": sparse_v1_only})
    assert any("sparse_apply_ftrl_v2" in f for f in failures)
    assert any(f.startswith("apply_ftrl_v2") or "apply_ftrl_v2-" in f for f in failures)


def test_verify_export_from_the_command_line(tmp_path):
    result = _cli("verify", "--cases", "1", "--ops", "sgd", "--export", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert vectors.check(tmp_path) == []


def test_muon_with_adamw_vectors_record_the_split_and_replay_through_the_numpy_class(tmp_path, monkeypatch):
    import ml_dtypes

    import optkernels.optimizers as O
    import optkernels.optimizers.muon as muon

    index = json.loads(vectors.export(tmp_path, cases=1, seed=2, only=["MuonWithAdamW"]).read_text())
    assert index["cases"] == [] and {e["dtype"] for e in index["optimizers"]} == {"float32", "float64"}
    decisions = {p["name"]: (p["muon"], p["weight_decay"]) for p in index["optimizers"][0]["parameters"]}
    assert decisions == {  # hidden matrices to Muon; embeddings, heads, biases, norms, convolutions to AdamW
        "embed.weight": (False, True), "layers.0.attn.in_proj.weight": (True, True),
        "layers.0.attn.in_proj.bias": (False, True), "layers.0.mlp.fc.weight": (True, True),
        "layers.0.norm.gamma": (False, False), "layers.0.norm.beta": (False, False),
        "conv.weight": (False, True), "lm_head.weight": (False, True)}
    # float32 within 8 ulps of the update's scale, float64 within 1e-12 (not bit for bit: BLAS sums, FMA)
    assert vectors.check(tmp_path) == []

    def every_matrix(params, **kw):
        return O.MuonWithAdamW(params, split=lambda name, shape: len(shape) == 2, **kw)

    assert any("Muon got" in f for f in vectors.check(tmp_path, muon_with_adamw=every_matrix))
    real = muon.newton_schulz
    monkeypatch.setattr(muon, "newton_schulz", lambda u, *a: real(u.astype(ml_dtypes.bfloat16).astype(u.dtype), *a))
    failures = vectors.check(tmp_path)  # torch's bfloat16 rounding of the Newton–Schulz input shows
    assert any("float32" in f and "weight param" in f for f in failures)
    assert any("float64" in f for f in failures)
