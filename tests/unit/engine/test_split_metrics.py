"""train.metrics (metric objects over a whole split), ctx.log, and the monitor checked
before the first step: one process here; tests/e2e/test_split_metrics_distributed.py has N."""

from __future__ import annotations

import csv
import functools
import re
from pathlib import Path

import pytest
import torch
from rich.console import Console
from sklearn.metrics import f1_score, roc_auc_score
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import trainwell
from tests import split_metrics_code as code
from tests.conftest import read_summary
from trainwell.config import load_config
from trainwell.engine.build.metric_guard import kept_metric_state
from trainwell.engine.build.metric_objects import in_split_order
from trainwell.engine.checkpointing.checkpoint import load_checkpoint
from trainwell.engine.distributed.placement import Placement
from trainwell.engine.loop.evaluate import eval_batches, slice_batch
from trainwell.engine.state.callbacks import CallbackError, Callbacks, Context
from trainwell.engine.state.early_stopping import auto_mode
from trainwell.errors import UserError

QUIET = Console(quiet=True)
BASE = ["train.precision=fp32", "doctor.enabled=false", "data.batch_size=32",
        "data.eval_batch_size=16", "train.log_every=4"]  # fmt: skip
STEPS = 8  # optimizer steps per epoch: 256 training samples, batch 32
CODE = "tests.split_metrics_code"


def fit(tmp_path: Path, *overrides: str, name: str = "run", data=None, model=None, **kw):
    train, val, test = data if data is not None else code.splits()
    cfg = load_config(overrides=[*BASE, f"run.dir={tmp_path / name}", *overrides])
    return trainwell.fit(cfg, model=model or code.mlp(), train_data=train, val_data=val,
                         test_data=test, console=QUIET, **kw)  # fmt: skip


def metric(name: str, cls: str, **kwargs) -> str:
    kw = ", ".join(f"{k}: {v}" for k, v in kwargs.items())
    return f"train.metrics.{name}={{name: '{CODE}:{cls}', kwargs: {{{kw}}}}}"


def rows(run_dir: Path, split: str, name: str) -> list[tuple[int, float]]:
    with open(run_dir / "metrics.csv", newline="") as f:
        return [(int(r["step"]), float(r["value"])) for r in csv.DictReader(f)
                if (r["split"], r["name"]) == (split, name)]  # fmt: skip


@torch.no_grad()
def predict(model, ds: TensorDataset) -> torch.Tensor:
    model.eval()
    return model(ds.tensors[0])


# ---- values over the whole split --------------------------------------------------------


@pytest.mark.slow
def test_macro_f1_over_the_split_is_sklearns_and_picks_the_best_checkpoint(tmp_path):
    train, val, test = code.splits()
    result = fit(tmp_path, "train.epochs=4", metric("f1", "MacroF1"),
                 "early_stop.monitor=val/f1", data=(train, val, test))  # fmt: skip
    summary = result.summary
    assert summary["monitor"] == "val/f1" and summary["best"]["metric"] == "val/f1"
    logged = rows(result.run_dir, "val", "f1")
    assert [s for s, _ in logged] == [STEPS * (e + 1) for e in range(4)]
    best_step, best = max(logged, key=lambda r: r[1])  # mode auto: max for an f1
    assert summary["best"]["value"] == best and summary["best"]["step"] == best_step
    # result.model holds best.pt's weights: sklearn on its predictions gives the same F1.
    expected = f1_score(val.tensors[1], predict(result.model, val).argmax(1), average="macro")
    assert best == pytest.approx(expected, abs=1e-12)
    assert load_checkpoint(result.run_dir / "checkpoints" / "best.pt")["step"] == best_step
    test_f1 = f1_score(test.tensors[1], predict(result.model, test).argmax(1), average="macro")
    assert result.metrics["test/f1"] == pytest.approx(test_f1, abs=1e-12)
    assert summary["test"]["f1"] == result.metrics["test/f1"]


@pytest.mark.slow
def test_a_counting_metric_counts_each_split_exactly_at_every_pass(tmp_path):
    result = fit(tmp_path, "train.epochs=3", metric("n", "SampleCount"), metric("c", "Count"))
    assert [v for _, v in rows(result.run_dir, "val", "n")] == [101.0] * 3  # reset each pass
    assert [v for _, v in rows(result.run_dir, "val", "c/samples")] == [101.0] * 3
    assert result.metrics["test/n"] == 37.0 and result.metrics["test/c/samples"] == 37.0
    assert read_summary(result.run_dir)["final"]["val/n"] == 101.0


@pytest.mark.slow
def test_auroc_over_every_score_of_the_split_is_sklearns(tmp_path):
    train, val = code.binary_splits()
    result = fit(tmp_path, "train.epochs=2", metric("auroc", "RankAUROC"),
                 data=(train, val, None), model=code.mlp(2))  # fmt: skip
    # The last evaluation's value, against the weights it evaluated (last.pt).
    model = code.mlp(2)
    model.load_state_dict(load_checkpoint(result.run_dir / "checkpoints" / "last.pt")["model"])
    logits = predict(model, val)
    expected = roc_auc_score(val.tensors[1], (logits[:, 1] - logits[:, 0]).numpy())
    assert result.metrics["val/auroc"] == pytest.approx(expected, abs=1e-9)
    assert 0.0 <= expected <= 1.0 and rows(result.run_dir, "val", "auroc")[-1][1] == (
        result.metrics["val/auroc"])  # fmt: skip


@pytest.mark.slow
def test_a_user_step_returning_preds_and_target_feeds_the_objects(tmp_path):
    train, val, test = code.splits()
    result = fit(tmp_path, "train.epochs=2", metric("f1", "MacroF1"), metric("n", "SampleCount"),
                 f"train.step={CODE}:prob_step", "early_stop.monitor=val/f1",
                 data=(train, val, test))  # fmt: skip
    # The same step trains (its preds/target are no metrics of training) and evaluates.
    assert "train/preds" not in result.metrics and "val/preds" not in result.metrics
    assert result.metrics["val/n"] == 101.0
    expected = f1_score(test.tensors[1], predict(result.model, test).argmax(1), average="macro")
    assert result.metrics["test/f1"] == pytest.approx(expected, abs=1e-12)


@pytest.mark.slow
def test_dict_batches_and_an_eval_step_given_in_python(tmp_path):
    def to_dicts(ds):
        x, y = ds.tensors
        return [{"x": x[i], "y": y[i]} for i in range(len(y))]

    train, val, _ = code.splits()
    result = fit(tmp_path, "train.epochs=1", metric("f1", "MergingMacroF1"),
                 data=(to_dicts(train), to_dicts(val), None), step_fn=code.dict_step)  # fmt: skip
    expected = f1_score(val.tensors[1], predict(result.model, val).argmax(1), average="macro")
    assert result.metrics["val/f1"] == pytest.approx(expected, abs=1e-12)


@pytest.mark.slow
def test_torchmetrics_objects_fit_as_they_are(tmp_path):
    pytest.importorskip("torchmetrics")
    f1 = ("train.metrics.tm_f1={name: 'torchmetrics.classification:MulticlassF1Score', "
          "kwargs: {num_classes: 4, average: macro}}")  # fmt: skip
    result = fit(tmp_path, "train.epochs=2", f1, metric("mine", "MacroF1"),
                 metric("count", "TorchCount"), "early_stop.monitor=val/tm_f1")  # fmt: skip
    assert result.summary["best"]["metric"] == "val/tm_f1"
    assert result.metrics["val/tm_f1"] == pytest.approx(result.metrics["val/mine"], abs=1e-6)
    assert result.metrics["test/tm_f1"] == pytest.approx(result.metrics["test/mine"], abs=1e-6)
    assert result.metrics["val/count"] == 101.0 and result.metrics["test/count"] == 37.0


@pytest.mark.slow
def test_metric_objects_handed_to_fit_in_python(tmp_path):
    train, val, test = code.splits()
    f1 = code.MergingMacroF1()
    result = fit(tmp_path, "train.epochs=1", metric("n", "SampleCount"), data=(train, val, test),
                 metrics={"f1": f1, "count": code.Count()})  # fmt: skip
    expected = f1_score(test.tensors[1], predict(result.model, test).argmax(1), average="macro")
    assert result.metrics["test/f1"] == pytest.approx(expected, abs=1e-12) == f1.compute()
    assert result.metrics["val/n"] == result.metrics["val/count/samples"] == 101.0
    with pytest.raises(UserError, match="'n' is in train.metrics too"):
        fit(tmp_path, "train.epochs=1", metric("n", "SampleCount"), name="twice",
            metrics={"n": code.SampleCount()})  # fmt: skip
    with pytest.raises(UserError, match="NoCompute has no compute"):
        fit(tmp_path, "train.epochs=1", name="bad", metrics={"x": code.NoCompute()})
    with pytest.raises(UserError, match="'a/b' is not a metric name"):
        fit(tmp_path, "train.epochs=1", name="slash", metrics={"a/b": code.SampleCount()})


# ---- the dry step feeds no metric ---------------------------------------------------------


class ReadCounter:
    """Reads the user's own module-level counter at each evaluation's end, then resets it."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def on_eval_end(self, ctx) -> None:
        self.seen.append(code.STEP_COUNTER.compute())
        code.STEP_COUNTER.reset()


@pytest.mark.slow
def test_the_dry_step_leaves_a_users_own_metric_state_untouched(tmp_path):
    code.STEP_COUNTER.reset()
    reader = ReadCounter()
    result = fit(tmp_path, "train.epochs=2", metric("n", "SampleCount"),
                 f"train.eval_step={CODE}:counting_eval_step", callbacks=[reader])  # fmt: skip
    # 101 validation samples, not 103: the dry step's two samples were put back.
    assert reader.seen == [101, 101]
    assert [v for _, v in rows(result.run_dir, "val", "n")] == [101.0, 101.0]


def test_metric_state_is_put_back_wherever_the_step_reaches_it():
    counter = code.SampleCount()
    in_dict = {"n": code.SampleCount()}
    owner = type("Holder", (), {})()
    owner.metric = code.SampleCount()
    module_metric = torch.nn.Module()
    tm = None
    if code.TorchCount is not None:
        tm = code.TorchCount()
        module_metric.count = tm

    def closure_step(model, batch):
        counter.update(None, batch)
        in_dict["n"].update(None, batch)
        owner.metric.update(None, batch)
        if tm is not None:
            tm.update(None, batch)

    def with_arg(model, batch, extra):
        extra.update(None, batch)

    extra = code.SampleCount()
    extra.update(None, torch.zeros(5))  # state from before: kept as it was
    with kept_metric_state(module_metric, closure_step, functools.partial(with_arg, extra=extra)):
        closure_step(None, torch.zeros(2))
        with_arg(None, torch.zeros(2), extra)
    assert counter.n == in_dict["n"].n == owner.metric.n == 0
    assert extra.n == 5
    if tm is not None:
        assert int(tm.compute()) == 0


# ---- early stopping and best.pt on a metric object -----------------------------------------


@pytest.mark.slow
def test_early_stopping_on_a_metric_object_stops_where_its_value_stopped_improving(tmp_path):
    result = fit(tmp_path, "train.epochs=10", metric("score", "ScriptedScore"),
                 "early_stop.monitor=val/score", "early_stop.patience=2")  # fmt: skip
    summary = result.summary
    # 0.1, 0.5 (best, epoch 2), 0.4, 0.3: two evaluations without improvement.
    assert summary["steps"] == 4 * STEPS
    assert "early stop" in summary["stop_reason"] and "val/score" in summary["stop_reason"]
    assert summary["best"] == {"metric": "val/score", "value": 0.5, "step": 2 * STEPS, "epoch": 1}
    best = load_checkpoint(result.run_dir / "checkpoints" / "best.pt")
    assert best["step"] == 2 * STEPS
    for name, tensor in result.model.state_dict().items():
        assert torch.equal(tensor, best["model"][name]), name


@pytest.mark.slow
def test_a_metric_object_that_says_lower_is_better_is_minimized(tmp_path):
    spec = metric("err", "ScriptedScore", values="[0.9, 0.3, 0.6, 0.7, 0.8]",
                  higher_is_better="false")  # fmt: skip
    result = fit(tmp_path, "train.epochs=10", spec, "early_stop.monitor=val/err",
                 "early_stop.patience=3")  # fmt: skip
    assert result.summary["best"]["value"] == 0.3 and result.summary["best"]["step"] == 2 * STEPS
    assert result.summary["steps"] == 5 * STEPS


# ---- ctx.log ------------------------------------------------------------------------------


@pytest.mark.slow
def test_ctx_log_in_on_eval_end_is_logged_and_monitored(tmp_path):
    result = fit(tmp_path, "train.epochs=10", "early_stop.monitor=val/custom",
                 "early_stop.mode=max", "early_stop.patience=2",
                 callbacks=[code.LogScore()])  # fmt: skip
    assert rows(result.run_dir, "val", "custom") == [(8, 0.2), (16, 0.9), (24, 0.5), (32, 0.4)]
    assert result.summary["best"] == {"metric": "val/custom", "value": 0.9, "step": 16,
                                      "epoch": 1}  # fmt: skip
    assert result.summary["final"]["val/custom"] == 0.4 and result.summary["steps"] == 32


@pytest.mark.slow
def test_a_name_logged_by_a_callback_that_declares_nothing_is_monitorable(tmp_path):
    result = fit(tmp_path, "train.epochs=10", "early_stop.monitor=val/custom",
                 "early_stop.patience=1", callbacks=[code.LogScoreUndeclared()])  # fmt: skip
    # mode auto reads "custom" as no score: min; 0.2 first, then 0.9 is worse: stop.
    assert result.summary["best"]["value"] == 0.2 and result.summary["steps"] == 16


@pytest.mark.slow
def test_a_tensor_logged_from_metrics_and_values_logged_every_step(tmp_path):
    result = fit(tmp_path, "train.epochs=2", callbacks=[code.LogFromMetric(),
                 code.LogsEveryStep()])  # fmt: skip
    loss = dict(rows(result.run_dir, "val", "loss"))
    assert rows(result.run_dir, "val", "one_minus_loss") == [
        (s, pytest.approx(1 - v)) for s, v in loss.items()
    ]
    assert rows(result.run_dir, "train", "step_parity") == [(s, s % 2) for s in range(1, 17)]


def test_ctx_log_refuses_names_and_values_it_cannot_log():
    cbs = Callbacks()
    cbs.writer = lambda n, v: None
    for name, value, said in [("score", 1.0, "split/name"), ("val/", 1.0, "split/name"),
                              ("val/x", "high", "a str"), ("val/x", torch.ones(3), r"shape \(3,\)"),
                              ("val/x", True, "a bool")]:  # fmt: skip
        with pytest.raises(UserError, match=said):
            Context(step=0, epoch=0, _log=cbs.log).log(name, value)
    cbs.reserved = {"val/loss": 0.3}
    with pytest.raises(UserError, match="engine's own"):
        cbs.log("val/loss", 0.1)
    with pytest.raises(UserError, match="belongs to no run"):
        Context(step=0, epoch=0).log("val/x", 1.0)


class LogsEngineName:
    def on_eval_end(self, ctx) -> None:
        ctx.log("val/loss", 0.0)


@pytest.mark.slow
def test_a_callback_logging_an_engine_metric_stops_the_run_saying_so(tmp_path):
    with pytest.raises(CallbackError, match="val/loss is the engine's own"):
        fit(tmp_path, "train.epochs=1", callbacks=[LogsEngineName()])


# ---- a monitor that names no metric: refused before the first step ------------------------


@pytest.mark.parametrize(
    ("monitor", "extra", "said"),
    [
        ("val/f2", [metric("f1", "MacroF1")], r"'val/f2' is not a metric.*val/f1"),
        ("val/acuracy", [], r"'val/acuracy' is not a metric.*val/accuracy, val/loss"),
        ("train/acc", [], r"'train/acc' is not a metric.*train/loss"),
        ("train/lr", [], r"'train/lr' is not a metric.*train/loss"),
        ("test/loss", [], r"test split is evaluated once, after training"),
        ("val/custom_typo", ["callbacks=[tests.split_metrics_code:LogScore]"],
         r"'val/custom_typo' is not a metric.*val/custom"),
    ],
)  # fmt: skip
def test_a_bad_monitor_is_one_line_and_exit_2_before_any_run_dir(cli, tmp_path, monitor, extra,
                                                                  said):
    data = [f"data.name={CODE}:splits", f"model.name={CODE}:mlp", "model.kwargs={}"]
    code_, out, err = cli("train", *BASE, *data, "run.dir=run", "train.epochs=1",
                          f"early_stop.monitor={monitor}", *extra)  # fmt: skip
    assert code_ == 2, out + err
    assert len(err.strip().splitlines()) == 1, err
    assert re.search(said, err), err
    assert not (tmp_path / "run").exists()  # nothing left that looks like a run


@pytest.mark.slow
def test_a_val_monitor_without_validation_data_is_refused_up_front(tmp_path):
    train, _, _ = code.splits()
    with pytest.raises(UserError, match="needs validation data"):
        fit(tmp_path, "train.epochs=1", "early_stop.monitor=val/loss",
            data=(train, None, None))  # fmt: skip
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_an_undeclared_callback_name_that_never_comes_fails_at_the_first_evaluation(tmp_path):
    with pytest.raises(UserError, match=r"'val/nothing'.*LogScoreUndeclared did not ctx.log"):
        fit(tmp_path, "train.epochs=3", "early_stop.monitor=val/nothing",
            callbacks=[code.LogScoreUndeclared()])  # fmt: skip
    summary = read_summary(tmp_path / "run")
    assert summary["status"] == "failed" and summary["steps"] == STEPS


# ---- bad train.metrics: one line ----------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("train.metrics={f1: {name: 'x:Y', kwarg: {}}}", "train.metrics.f1: unknown key 'kwarg'"),
        ("train.metrics={loss: 'x:Y'}", "'loss' is the step's own"),
        ("train.metrics={f1: MacroF1}", "not an import path"),
        ("train.metrics={f1: {kwargs: {}}}", "is not 'pkg.module:Cls'"),
        (f"train.metrics={{f1: '{CODE}:NoCompute'}}", "has no compute()"),
        (f"train.metrics={{f1: '{CODE}:Nope'}}", "has no attribute 'Nope'"),
        (f"train.metrics={{accuracy: '{CODE}:MacroF1'}}", "already returns a metric 'accuracy'"),
        (f"train.metrics={{f1: {{name: '{CODE}:MacroF1', kwargs: {{classes: 3}}}}}}",
         "cannot call MacroF1"),
    ],
)  # fmt: skip
def test_bad_metric_specs_are_one_line_before_any_run_dir(cli, tmp_path, spec, said):
    data = [f"data.name={CODE}:splits", f"model.name={CODE}:mlp", "model.kwargs={}"]
    code_, out, err = cli("train", *BASE, *data, "run.dir=run", "train.epochs=1", spec)
    assert code_ == 2, out + err
    assert said in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_user_eval_step_without_preds_is_refused_before_the_run(tmp_path):
    with pytest.raises(UserError, match="returns no 'preds' and 'target'"):
        fit(tmp_path, "train.epochs=1", metric("f1", "MacroF1"),
            f"train.step={CODE}:loss_only_step")  # fmt: skip
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_compute_that_returns_a_vector_is_one_line(tmp_path):
    with pytest.raises(UserError, match=r"train.metrics.bad: compute\(\) returned a tensor"):
        fit(tmp_path, "train.epochs=1", metric("bad", "Broken"))


# ---- units: shards without duplicates, the replay's order, the auto mode ------------------


@pytest.mark.parametrize(("n", "world", "batch"), [(5, 2, 2), (101, 2, 16), (10, 3, 4), (7, 4, 1)])
def test_padded_distributed_samplers_give_each_sample_once(n, world, batch):
    ds = TensorDataset(torch.arange(n))
    for shuffle in (False, True):
        seen = []
        for rank in range(world):
            place = Placement(torch.device("cpu"), rank=rank, world_size=world)
            s = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=shuffle, seed=3)
            seen += [i for b in eval_batches(DataLoader(ds, batch, sampler=s), place)
                     for i in b[0].tolist()]  # fmt: skip
        assert sorted(seen) == list(range(n))


def test_an_unsharded_loader_is_split_by_batches_across_ranks():
    ds = TensorDataset(torch.arange(23))
    got = []
    for rank in range(3):
        place = Placement(torch.device("cpu"), rank=rank, world_size=3)
        got += [i for b in eval_batches(DataLoader(ds, 4), place) for i in b[0].tolist()]
    assert sorted(got) == list(range(23))


def test_the_replay_puts_strided_shards_back_in_the_splits_order():
    n, world, batch = 11, 3, 2
    preds = torch.arange(n * 2).view(n, 2)
    labels = [f"s{i}" for i in range(n)]
    ranks = []
    for r in range(world):
        idx = list(range(r, n, world))
        ranks.append([(preds[idx[i : i + batch]], [labels[j] for j in idx[i : i + batch]])
                      for i in range(0, len(idx), batch)])  # fmt: skip
    out = list(in_split_order(ranks, batch))
    assert [len(t) for _, t in out] == [2, 2, 2, 2, 2, 1]  # one process's batches
    assert torch.equal(torch.cat([p for p, _ in out]), preds)
    assert [x for _, t in out for x in t] == labels
    # Batches that do not fit the layout come as they were, rank after rank.
    assert len(list(in_split_order(ranks, None))) == sum(len(r) for r in ranks)


def test_slice_batch_cuts_every_per_sample_leaf():
    batch = ({"x": torch.ones(4, 3), "ids": ["a", "b", "c", "d"]}, torch.arange(4), 9)
    cut = slice_batch(batch, 4, 3)
    assert cut[0]["x"].shape == (3, 3) and cut[0]["ids"] == ["a", "b", "c"]
    assert cut[1].tolist() == [0, 1, 2] and cut[2] == 9


def test_auto_mode_maximizes_scores_and_minimizes_the_rest():
    maximized = ["val/accuracy", "val/f1", "val/macro_f1", "val/auroc", "val/mAP", "val/bleu",
                 "val/top5", "val/f1/macro", "val/dice_score", "val/r2"]  # fmt: skip
    minimized = ["val/loss", "val/mae", "val/mape", "val/rmse", "val/wer", "val/custom"]
    assert [auto_mode(m, {}) for m in maximized] == ["max"] * len(maximized)
    assert [auto_mode(m, {}) for m in minimized] == ["min"] * len(minimized)
    assert auto_mode("val/custom", {"val/custom": True}) == "max"
