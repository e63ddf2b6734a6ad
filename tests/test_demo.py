"""``python -m optkernels demo``: the command line, the learning claim, the plot, bad arguments, and the
demo's own math (gradients by finite differences, AUC by counting pairs, the data generators)."""
import io
import math
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from optkernels.cli import main as cli_main
from optkernels.demo import data, metrics
from optkernels.demo.click import ClickModel
from optkernels.demo.mlp import MLP
from optkernels.demo.progress import Progress
from optkernels.demo.recipes import CLICK_RECIPES, MLP_RECIPES, all_names

ROOT = Path(__file__).resolve().parents[1]
_ROW = re.compile(r"^(\w+) +(\S+) +(\S+) +(\S+) +(\S+)  ")


def _demo(*args: str, code: str | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m optkernels demo ARGS`` (or ``python -c CODE``) with this checkout first on the path."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    command = [sys.executable, "-c", code] if code else [sys.executable, "-m", "optkernels", "demo", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)


def _tables(stdout: str) -> dict[str, dict[str, tuple[float, ...]]]:
    """``{model title: {optimizer: (final loss, score, opt ms, step ms)}}`` from the demo's report."""
    tables: dict[str, dict[str, tuple[float, ...]]] = {}
    current = None
    for line in stdout.splitlines():
        if line.startswith("## "):
            current = tables.setdefault(line[3:].strip(), {})
        elif current is not None and (match := _ROW.match(line)) and match.group(1) != "optimizer":
            current[match.group(1)] = tuple(float(x) for x in match.groups()[1:])
    return tables


# ------------------------------------------------------------------------------------------- command line

def test_small_run_through_the_command_line():
    result = _demo("--steps", "40", "--seed", "3", "--optimizers", "sgd", "ADAM", "lazyadam", "Ftrl")
    assert result.returncode == 0, result.stderr
    tables = _tables(result.stdout)
    assert set(tables) == {"spirals MLP", "click-through"}
    assert set(tables["spirals MLP"]) == {"SGD", "Adam"}
    assert set(tables["click-through"]) == {"Adam", "LazyAdam", "FTRL"}
    for rows in tables.values():
        for numbers in rows.values():
            assert all(math.isfinite(x) for x in numbers), result.stdout
            loss, score, opt_ms, step_ms = numbers
            assert loss > 0 and 0 <= score <= 1 and 0 < opt_ms <= step_ms
    # stderr is not a terminal: no bar, a line as each optimizer starts and one per model.
    lines = result.stderr.splitlines()
    assert "\r" not in result.stderr, result.stderr
    assert lines[:2] == ["spirals MLP [1/2] SGD: 40 steps", "spirals MLP [2/2] Adam: 40 steps"]
    assert lines[2].startswith("spirals MLP: 2 optimizer(s) x 40 steps in ")
    assert lines[3:6] == [f"click-through [{k}/3] {name}: 40 steps" for k, name in
                          enumerate(("Adam", "LazyAdam", "FTRL"), 1)]
    assert lines[6].startswith("click-through: 3 optimizer(s) x 40 steps") and len(lines) == 7


def test_a_model_that_no_chosen_optimizer_trains_is_skipped():
    result = _demo("--steps", "5", "--optimizers", "proximaladagrad")
    assert result.returncode == 0, result.stderr
    assert set(_tables(result.stdout)) == {"click-through"}


def test_main_help_lists_demo():
    result = subprocess.run([sys.executable, "-m", "optkernels", "--help"], capture_output=True, text=True,
                            cwd=ROOT, timeout=120)
    assert result.returncode == 0 and "demo" in result.stdout


@pytest.mark.parametrize("args, message", [
    (["--steps", "0"], "argument --steps: expected a positive integer, got '0'"),
    (["--steps", "many"], "argument --steps: expected a positive integer, got 'many'"),
    (["--seed", "-1"], "argument --seed: expected a non-negative integer, got '-1'"),
    (["--optimizers", "adam", "adamw"], "argument --optimizers: unknown optimizer 'adamw'; choose from SGD"),
    (["--optimizers"], "argument --optimizers: expected at least one argument"),
    (["--plot", "curves.jpg"], "give a file name ending in .png, got 'curves.jpg'"),
    (["--plot", "no/such/folder/curves.png"],
     "the folder 'no/such/folder' of 'no/such/folder/curves.png' does not exist"),
    (["--threads", "100000"], "argument --threads: at most"),
    (["--frobnicate"], "unrecognized arguments: --frobnicate"),
])
def test_bad_arguments_are_one_line_and_exit_2(args, message, capsys):
    try:
        code = cli_main(["demo", *args])
    except SystemExit as stop:
        code = stop.code
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("python -m optkernels demo: error: ") and message in lines[0], lines[0]


def test_bad_argument_exit_code_in_a_real_process():
    result = _demo("--optimizers", "nadam")
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and "unknown optimizer 'nadam'" in result.stderr


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib", reason="--plot needs matplotlib (the 'demo' extra)")
    from matplotlib.image import imread

    path = tmp_path / "curves.png"
    result = _demo("--steps", "20", "--optimizers", "momentum", "adam", "--plot", str(path))
    assert result.returncode == 0, result.stderr
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    height, width = imread(str(path)).shape[:2]
    assert width > 2 * height > 400     # two panels side by side
    assert f"wrote the loss curves to {path}" in result.stdout


def test_plot_without_matplotlib_is_one_clear_line(tmp_path):
    code = textwrap.dedent(f"""
        import importlib.abc, sys

        class NoMatplotlib(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name == "matplotlib" or name.startswith("matplotlib."):
                    raise ImportError("blocked by the test")
                return None

        sys.meta_path.insert(0, NoMatplotlib())
        from optkernels.cli import main
        sys.exit(main(["demo", "--steps", "5", "--plot", {str(tmp_path / "x.png")!r}]))
    """)
    result = _demo(code=code)
    assert result.returncode == 2
    assert result.stdout == ""                          # checked before any training
    assert result.stderr.count("\n") == 1
    assert "--plot needs matplotlib" in result.stderr and "pip install matplotlib" in result.stderr
    assert not (tmp_path / "x.png").exists()


# ---------------------------------------------------------------------------------------- the learning claim

@pytest.fixture
def one_numba_thread():
    import numba

    before = numba.get_num_threads()
    numba.set_num_threads(1)
    yield
    numba.set_num_threads(before)


def test_every_optimizer_learns(one_numba_thread):
    """1,000 steps of every optimizer on both models: the held-out loss falls well below the initial loss,
    and accuracy (chance 0.5) and AUC (chance 0.5) are far above chance."""
    from optkernels.demo import run

    out = io.StringIO()
    done = run(steps=1000, seed=1, out=out, progress=Progress(io.StringIO()))
    (spirals, mlp_results), (clicks, click_results) = done
    assert [r.name for r in mlp_results] == [r.name for r in MLP_RECIPES]
    assert [r.name for r in click_results] == [r.name for r in CLICK_RECIPES]
    for r in mlp_results:
        assert not r.diverged and len(r.losses) == 1000
        assert r.initial_loss == mlp_results[0].initial_loss          # the same initial weights for all
        assert r.final_loss < 0.5 * r.initial_loss, (r.name, r.final_loss, r.initial_loss)
        assert r.final_score > 0.85, (r.name, r.final_score)
    for r in click_results:
        assert not r.diverged
        assert r.initial_loss == click_results[0].initial_loss
        assert r.final_loss < 0.8 * r.initial_loss, (r.name, r.final_loss, r.initial_loss)
        assert r.final_score > 0.72, (r.name, r.final_score)
        assert r.final_score < clicks.true_auc + 0.01                 # no model beats the true probabilities
    report = out.getvalue()
    for name in all_names():
        assert re.search(rf"^{name} ", report, re.M), name


def test_runs_are_reproducible(one_numba_thread):
    from optkernels.demo.recipes import select
    from optkernels.demo.tasks import ClickTask, SpiralsTask
    from optkernels.demo.training import train

    for task_class, name in ((SpiralsTask, "Lamb"), (ClickTask, "LazyAdam")):
        (recipe,) = select(task_class.recipes, [name])
        first, second = (train(task_class(15, 7), recipe) for _ in range(2))
        np.testing.assert_array_equal(first.losses, second.losses)
        assert first.final_loss == second.final_loss


def test_click_table_gradients_take_the_sparse_path(one_numba_thread):
    """Non-lazy Adam moves the rows of earlier batches (their moments decay), LazyAdam only the batch's rows
    (given a dense gradient, it would move the earlier rows too); rows never seen keep their values."""
    from optkernels.demo.recipes import select
    from optkernels.demo.tasks import ClickTask

    task = ClickTask(2, 0)
    (rows0, clicks0), (rows1, clicks1) = task.batch(0), task.batch(1)
    only_first = np.setdiff1d(rows0, rows1)
    never = np.setdiff1d(np.arange(task.rows), np.union1d(rows0, rows1))
    assert only_first.size > 100 and never.size > 60000
    for name, moves_earlier_rows in (("Adam", True), ("LazyAdam", False)):
        (recipe,) = select(task.recipes, [name])
        model = task.new_model()
        initial = model.table.data.copy()
        optimizer = recipe.build(model.parameters)
        optimizer(tuple(model.loss_and_gradients(rows0, clicks0)[1]))
        after_first = model.table.data.copy()
        assert np.all(np.any(after_first[np.unique(rows0)] != initial[np.unique(rows0)], axis=1))
        optimizer(tuple(model.loss_and_gradients(rows1, clicks1)[1]))
        moved = np.any(model.table.data[only_first] != after_first[only_first], axis=1)
        assert moved.all() if moves_earlier_rows else not moved.any(), name
        np.testing.assert_array_equal(model.table.data[never], initial[never])


# ------------------------------------------------------------------------------- the demo's own math

def _numeric_gradient(loss, array: np.ndarray, entries) -> np.ndarray:
    """Central differences of ``loss()`` in the given entries of ``array`` (changed and restored)."""
    out = []
    for index in entries:
        saved = array[index]
        h = 1e-6 * max(1.0, abs(saved))
        array[index] = saved + h
        up = loss()
        array[index] = saved - h
        down = loss()
        array[index] = saved
        out.append((up - down) / (2 * h))
    return np.array(out)


def test_mlp_gradients_match_finite_differences():
    rng = np.random.default_rng(0)
    model = MLP((2, 5, 4, 3), rng, dtype=np.float64, input_gain=2.0)
    for b in model.biases:
        b.data[:] = rng.normal(0, 0.3, b.shape)
    x = rng.normal(size=(7, 2))
    y = rng.integers(0, 3, 7)
    _, grads = model.loss_and_gradients(x, y)
    assert [g.shape for g in grads] == [p.shape for p in model.parameters]
    for param, grad in zip(model.parameters, grads):
        entries = list(np.ndindex(param.shape))
        numeric = _numeric_gradient(lambda: model.loss_and_gradients(x, y)[0], param.data, entries)
        np.testing.assert_allclose([grad[e] for e in entries], numeric, rtol=1e-6, atol=1e-9,
                                   err_msg=param.name)


def test_click_model_gradients_match_finite_differences():
    rng = np.random.default_rng(1)
    model = ClickModel(16, 3, rng, dtype=np.float64)
    model.bias.data[:] = 0.2
    rows = rng.integers(0, 16, (9, 4))
    rows[1] = rows[0]                      # repeated rows within and across examples
    rows[2, :2] = 5
    clicks = (rng.random(9) < 0.4).astype(np.float32)
    _, (table_grad, w_grad, b_grad) = model.loss_and_gradients(rows, clicks)
    assert table_grad.indices.shape == (36,) and table_grad.dense_shape == (16, 3)
    loss = lambda: model.loss_and_gradients(rows, clicks)[0]  # noqa: E731
    dense = table_grad.to_dense()
    entries = list(np.ndindex(16, 3))
    numeric = _numeric_gradient(loss, model.table.data, entries)
    np.testing.assert_allclose([dense[e] for e in entries], numeric, rtol=1e-6, atol=1e-9)
    untouched = np.setdiff1d(np.arange(16), rows)
    assert np.all(dense[untouched] == 0)
    np.testing.assert_allclose(w_grad, _numeric_gradient(loss, model.weight.data, [0, 1, 2]), rtol=1e-6)
    np.testing.assert_allclose(b_grad, _numeric_gradient(loss, model.bias.data, [0]), rtol=1e-6)


def test_losses_match_their_formulas():
    rng = np.random.default_rng(2)
    z = rng.normal(0, 3, (6, 4))
    y = rng.integers(0, 4, 6)
    loss, grad = metrics.softmax_cross_entropy(z, y)
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    assert loss == pytest.approx(-np.mean(np.log(p[np.arange(6), y])), rel=1e-12)
    np.testing.assert_allclose(grad, (p - np.eye(4)[y]) / 6, rtol=1e-12, atol=1e-15)
    logits = np.array([-800.0, -3.0, 0.0, 2.5, 800.0])
    targets = np.array([0.0, 1.0, 1.0, 0.0, 1.0])
    loss, grad = metrics.logistic_loss(logits, targets)
    expected = np.array([0.0, 3.0 + np.log1p(np.exp(-3.0)), np.log(2.0), 2.5 + np.log1p(np.exp(-2.5)), 0.0])
    assert loss == pytest.approx(expected.mean(), rel=1e-12)
    np.testing.assert_allclose(grad, (1 / (1 + np.exp(-np.clip(logits, -50, 50))) - targets) / 5, atol=1e-15)


def test_auc_counts_ordered_pairs_with_ties_as_half():
    rng = np.random.default_rng(3)
    scores = rng.integers(0, 6, 300).astype(np.float64)        # many ties
    targets = (rng.random(300) < 0.3).astype(np.float32)
    pos, neg = scores[targets == 1], scores[targets == 0]
    pairs = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    assert metrics.roc_auc(scores, targets) == pytest.approx(pairs / (pos.size * neg.size), rel=1e-12)
    assert metrics.roc_auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == 0.75    # sklearn's documented example
    with pytest.raises(ValueError, match="both positive and negative"):
        metrics.roc_auc([0.2, 0.3], [1, 1])


# ---------------------------------------------------------------------------------------------- the data

def test_spirals_are_balanced_and_reproducible():
    x, y = data.spirals(1000, np.random.default_rng(5))
    x2, y2 = data.spirals(1000, np.random.default_rng(5))
    np.testing.assert_array_equal(x, x2)
    np.testing.assert_array_equal(y, y2)
    assert x.dtype == np.float32 and x.shape == (1000, 2) and np.bincount(y).tolist() == [500, 500]
    assert np.abs(x).max() < 1.2


def test_batch_order_visits_every_example_once_per_epoch():
    order = data.batch_order(10, 4, 7, np.random.default_rng(0))     # 28 draws: two epochs and 8 more
    assert order.shape == (7, 4)
    flat = order.ravel()
    assert sorted(flat[:10]) == list(range(10)) and sorted(flat[10:20]) == list(range(10))
    assert len(set(flat[20:])) == 8


def test_hashing_stays_in_the_table_and_spreads():
    values = np.stack([np.arange(5000), np.arange(5000) % 7], axis=1)
    rows = data.hash_features(values, 2 ** 16)
    assert rows.dtype == np.int64 and rows.min() >= 0 and rows.max() < 2 ** 16
    np.testing.assert_array_equal(rows, data.hash_features(values, 2 ** 16))
    assert len(np.unique(rows[:, 0])) > 4900                      # few collisions among 5,000 keys
    assert rows[0, 0] != rows[0, 1]                               # field 0 and field 1 of value 0 differ
    with pytest.raises(ValueError, match="power of two"):
        data.hash_features(values, 1000)


def test_click_logs_follow_their_probabilities():
    logs, effects = data.click_logs(50_000, np.random.default_rng(4))
    assert logs.values.shape == (50_000, len(data.FIELD_SIZES))
    assert np.all(logs.values < np.array(data.FIELD_SIZES)) and np.all(logs.values >= 0)
    # The click rate matches the mean probability (within 4 standard errors), and the probability is the
    # stated function of the effects.
    assert abs(logs.clicks.mean() - logs.probability.mean()) < 4 * np.sqrt(0.25 / 50_000)
    log_odds = data.BASE_LOG_ODDS + sum(theta[logs.values[:, f]] for f, theta in enumerate(effects))
    np.testing.assert_allclose(logs.probability, 1 / (1 + np.exp(-log_odds)), rtol=1e-12)
    # Frequent values first: value 0 of the largest field is the most common.
    assert np.bincount(logs.values[:, 0]).argmax() == 0


# ------------------------------------------------------------------------------------------ progress bar

def test_progress_off_a_terminal_is_a_line_per_run():
    stream = io.StringIO()
    progress = Progress(stream)
    assert not progress.interactive
    progress.begin_task("model", 1)
    progress.begin_run(1, "Adam", 10)
    for step in range(1, 11):
        progress.update(step, 0.5)
        assert stream.getvalue() == "model [1/1] Adam: 10 steps\n"   # no bar drawn into a pipe
    progress.end_task("model: done")
    assert stream.getvalue() == "model [1/1] Adam: 10 steps\nmodel: done\n"


def test_progress_bar_on_a_terminal():
    stream = io.StringIO()
    progress = Progress(stream, interactive=True, width=10, interval=0.0)
    progress.begin_task("spirals", 2)
    progress.begin_run(2, "SGD", 4)
    progress.update(2, 0.25)
    progress.end_task("spirals: done")
    text = stream.getvalue()
    assert "\rspirals [2/2] SGD              [----------] 0/4" in text
    assert "\rspirals [2/2] SGD              [#####-----] 2/4, loss=0.2500" in text
    assert text.endswith("spirals: done\n")
    assert "\n" not in text[: -len("spirals: done\n")]   # the bar is redrawn in place, then cleared
