"""optim.groups, frozen parameters, groups added at run time, fit(optimizer=, scheduler=):
each fine-tuning variant trained, checked, and resumed bit for bit across the unfreeze."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
import torch
from rich.console import Console
from torch import nn
from torch.utils.data import TensorDataset

import trainwell
from trainwell.config import load_config
from trainwell.engine.build.optim import OptimConfig, build_optimizer
from trainwell.engine.build.param_groups import build_groups
from trainwell.engine.checkpointing.checkpoint import load_checkpoint
from trainwell.errors import UserError

QUIET = Console(quiet=True)
# 320 samples / 32 = 10 optimizer steps per epoch: epoch 1 starts after step 10.
COMMON = ["train.epochs=3", "data.batch_size=32", "checkpoint.every_steps=4",
          "checkpoint.keep_last=100", "train.log_every=2"]  # fmt: skip


class Net(nn.Module):
    """A backbone (Linear + LayerNorm, with dropout so the RNG matters) and a head."""

    def __init__(self, freeze: bool = True) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.backbone = nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Dropout(0.1),
                                      nn.LayerNorm(12))  # fmt: skip
        self.head = nn.Linear(12, 3)
        if freeze:
            self.backbone.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))


class Unfreeze:
    """Unfreezes the backbone at the first step of ``epoch``; ``add`` also puts it in a
    new optimizer group (as Lightning's unfreeze_and_add_param_group does)."""

    def __init__(self, epoch: int = 1, add: float | None = None) -> None:
        self.epoch, self.add, self.done = epoch, add, False

    def on_step_end(self, ctx) -> None:
        if ctx.epoch >= self.epoch and not self.done:
            self.done = True
            ctx.model.backbone.requires_grad_(True)
            if self.add is not None:
                ctx.optimizer.add_param_group(
                    {"params": list(ctx.model.backbone.parameters()), "lr": self.add,
                     "name": "backbone"})  # fmt: skip

    def state_dict(self) -> dict:
        return {"done": self.done}

    def load_state_dict(self, state: dict) -> None:
        self.done = state["done"]


def data() -> TensorDataset:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(320, 6, generator=g)
    return TensorDataset(x, (x[:, 0] > 0).long() + (x[:, 1] > 0).long())


def run(run_dir: Path, *overrides: str, resume=None, callbacks=(), model=None, **kw):
    cfg = load_config(overrides=[*COMMON, f"run.dir={run_dir}", *overrides])
    ds = data()
    return trainwell.fit(cfg, model=model or Net(), train_data=ds, val_data=ds,
                         loss_fn=nn.CrossEntropyLoss(), callbacks=list(callbacks),
                         resume=resume, console=QUIET, **kw)  # fmt: skip


def lr_rows(run_dir: Path) -> dict[str, dict[int, float]]:
    rows: dict[str, dict[int, float]] = {}
    with open(run_dir / "metrics.csv") as f:
        for row in csv.DictReader(f):
            if row["name"].startswith("lr"):
                rows.setdefault(row["name"], {})[int(row["step"])] = float(row["value"])
    return rows


def assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def backbone_at(run_dir: Path, step: int) -> torch.Tensor:
    name = "last.pt" if step < 0 else f"step-{step}.pt"
    return load_checkpoint(run_dir / "checkpoints" / name)["model"]["backbone.0.weight"]


def resumes_exactly(tmp_path: Path, full, steps: list[int], *overrides: str, **kw) -> None:
    """Resuming from each step-N checkpoint of the run in ``tmp_path/full`` ends with the
    same weights, optimizer moments and metrics as the uninterrupted run."""
    full_last = load_checkpoint(tmp_path / "full" / "checkpoints" / "last.pt")
    for step in steps:
        factory = kw.pop("fresh", None)
        extra = factory() if factory else {}
        again = run(tmp_path / f"from-{step}", *overrides,
                    resume=tmp_path / "full" / "checkpoints" / f"step-{step}.pt",
                    **{**kw, **extra})  # fmt: skip
        if factory:
            kw["fresh"] = factory
        assert again.metrics == full.metrics, step
        assert_same(full.model.state_dict(), again.model.state_dict())
        last = load_checkpoint(tmp_path / f"from-{step}" / "checkpoints" / "last.pt")
        assert last["optimizer"]["param_groups"] == full_last["optimizer"]["param_groups"]
        for i, moments in full_last["optimizer"]["state"].items():
            for name, value in moments.items():
                assert torch.equal(value, last["optimizer"]["state"][i][name]), (step, i, name)
        # The resumed run's own metrics.csv starts after the checkpoint.
        later = {name: {k: v for k, v in rows.items() if k > step}
                 for name, rows in lr_rows(tmp_path / "full").items()}  # fmt: skip
        assert lr_rows(tmp_path / f"from-{step}") == {k: v for k, v in later.items() if v}, step


# ---- the groups themselves --------------------------------------------------------------


def test_first_match_wins_and_the_rest_keep_the_defaults():
    net = Net(freeze=False)
    groups = build_groups(
        net,
        [
            {"params": "backbone.3.*", "lr": 0.5, "name": "norm"},
            {
                "params": ["backbone.*", "nothing.*"],
                "lr_scale": 0.1,
                "weight_decay": 0.3,
                "betas": [0.5, 0.6],
            },
        ],
        0.01,
        0.05,
    )
    by = {(g.get("name"), g["weight_decay"]): g for g in groups}
    names = {id(p): n for n, p in net.named_parameters()}

    def members(g):
        return sorted(names[id(p)] for p in g["params"])

    # The unmatched (the head) first, with the defaults: train/lr stays optim.lr's.
    assert groups[0].get("name") is None and members(groups[0]) == ["head.weight"]
    assert members(by[(None, 0.0)]) == ["head.bias"]
    assert members(by[("norm", 0.0)]) == ["backbone.3.bias", "backbone.3.weight"]
    assert by[("norm", 0.0)]["lr"] == 0.5
    # lr_scale multiplies optim.lr; biases and norm weights still get no decay in a group.
    assert members(by[("backbone", 0.3)]) == ["backbone.0.weight"]
    assert members(by[("backbone", 0.0)]) == ["backbone.0.bias"]
    assert by[("backbone", 0.3)]["lr"] == pytest.approx(0.001)
    assert by[("backbone", 0.3)]["betas"] == [0.5, 0.6]
    # Every parameter once.
    held = sorted(i for g in groups for i in map(id, g["params"]))
    assert held == sorted(map(id, net.parameters()))


def test_frozen_parameters_are_in_the_optimizer_and_untouched_until_unfrozen():
    for name in ("adamw", "sgd", "adam"):
        net = Net(freeze=True)
        opt = build_optimizer(OptimConfig(name=name, lr=0.1, weight_decay=0.5), net)
        held = {id(p) for g in opt.param_groups for p in g["params"]}
        assert held == {id(p) for p in net.parameters()}, name
        frozen = net.backbone[0].weight.detach().clone()
        head = net.head.weight.detach().clone()
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            net(torch.randn(8, 6)).sum().backward()
            opt.step()
        # No update and no weight decay while frozen, though the head trains.
        assert torch.equal(net.backbone[0].weight, frozen), name
        assert not torch.equal(net.head.weight, head), name
        net.backbone.requires_grad_(True)
        opt.zero_grad(set_to_none=True)
        net(torch.randn(8, 6)).sum().backward()
        opt.step()
        assert not torch.equal(net.backbone[0].weight, frozen), name


@pytest.mark.parametrize(
    ("groups", "expected"),
    [
        (
            "[{params: 'encoder.*', lr: 0.1}]",
            "optim.groups[0].params: 'encoder.*' matches no parameter of Sequential",
        ),
        (
            "[{params: '0.*', lr_sacle: 0.1}]",
            "optim.groups[0]: unknown key 'lr_sacle'; did you mean lr_scale?",
        ),
        ("[{params: '0.*', lr: 0.1, lr_scale: 2}]", "sets both lr and lr_scale"),
        ("[{params: '0.*', momentun: 0.5}]", "unknown key 'momentun'"),
        ("[{lr: 0.1}]", "optim.groups[0]: has no 'params'"),
        ("[{params: 3}]", "optim.groups[0].params: must be a glob"),
        ("[{params: '0.*', lr: -1}]", "optim.groups[0].lr: must be a finite number"),
        (
            "[{params: '0.*'}, {params: '2.*', name: '0'}]",
            "optim.groups[1].name: '0' names another group too",
        ),
    ],
)
def test_bad_groups_are_one_line_and_exit_2(cli, groups, expected):
    code, out, err = cli("train", "data.name=synthetic", "model.name=mlp", "train.max_steps=2",
                         "data.kwargs.num_samples=64", "data.batch_size=16",
                         f"optim.groups={groups}")  # fmt: skip
    assert code == 2, out + err
    assert expected in err and len(err.strip().splitlines()) == 1, err
    assert not (Path.cwd() / "runs").exists() or not any((Path.cwd() / "runs").rglob("*.pt"))


def test_an_import_path_optimizer_checks_its_own_group_keys():
    net = Net(freeze=False)
    cfg = OptimConfig(name="torch.optim:RMSprop", groups=[{"params": "head.*", "alpha": 0.5}])
    opt = build_optimizer(cfg, net)
    assert [g["alpha"] for g in opt.param_groups if g.get("name") == "head"] == [0.5, 0.5]
    cfg = OptimConfig(name="torch.optim:RMSprop", groups=[{"params": "head.*", "betas": [1, 2]}])
    with pytest.raises(UserError, match=r"optim.groups\[0\]: unknown key 'betas'"):
        build_optimizer(cfg, net)


# ---- end to end: fine-tuning variants, each resumed exactly -------------------------------


@pytest.mark.slow
def test_frozen_backbone_unfrozen_at_epoch_1_trains_with_its_group_lr_and_resumes(tmp_path):
    groups = "optim.groups=[{params: 'backbone.*', lr_scale: 0.1, name: bb}]"
    full = run(tmp_path / "full", groups, callbacks=[Unfreeze(1)])
    start = Net().backbone[0].weight
    # Frozen through epoch 0 (steps 1-10), trained after.
    assert torch.equal(backbone_at(tmp_path / "full", 8), start)
    assert not torch.equal(backbone_at(tmp_path / "full", 12), start)
    lrs = lr_rows(tmp_path / "full")
    assert set(lrs) == {"lr", "lr/bb"}
    for step, lr in lrs["lr"].items():
        assert lrs["lr/bb"][step] == pytest.approx(lr * 0.1, rel=1e-12)
    # Before the unfreeze, at it, after it.
    resumes_exactly(tmp_path, full, [8, 12, 20], groups, callbacks=[Unfreeze(1)])


@pytest.mark.slow
def test_two_groups_with_lr_scale_under_warmup_and_cosine(tmp_path):
    groups = ("optim.groups=[{params: 'head.*', lr_scale: 10}, "
              "{params: 'backbone.3.*', lr_scale: 0.5, weight_decay: 0.0}]")  # fmt: skip
    full = run(tmp_path / "full", groups, "sched.warmup_steps=5", "optim.lr=0.002",
               model=Net(freeze=False))  # fmt: skip
    lrs = lr_rows(tmp_path / "full")
    assert set(lrs) == {"lr", "lr/head", "lr/backbone.3"}
    total = 30
    for step, lr in lrs["lr"].items():
        # The scheduler's factor for the next step (the lr logged after step `step`).
        k = step
        factor = (k + 1) / 5 if k < 5 else 0.01 + 0.99 * 0.5 * (
            1 + math.cos(math.pi * min(1.0, (k - 5) / (total - 5))))  # fmt: skip
        assert lr == pytest.approx(0.002 * factor, rel=1e-9), step
        assert lrs["lr/head"][step] == pytest.approx(lr * 10, rel=1e-9)
        assert lrs["lr/backbone.3"][step] == pytest.approx(lr * 0.5, rel=1e-9)
    resumes_exactly(tmp_path, full, [4, 16], groups, "sched.warmup_steps=5", "optim.lr=0.002",
                    fresh=lambda: {"model": Net(freeze=False)})  # fmt: skip


@pytest.mark.slow
def test_unfreeze_by_add_param_group_follows_the_schedule_and_resumes(tmp_path):
    full = run(tmp_path / "full", "sched.warmup_steps=3", callbacks=[Unfreeze(1, add=0.01)])
    last = load_checkpoint(tmp_path / "full" / "checkpoints" / "last.pt")
    groups = last["optimizer"]["param_groups"]
    assert groups[-1]["name"] == "backbone" and len(groups[-1]["params"]) == 4
    # The backbone moved out of the configured groups into the new one.
    layout = last["optim_layout"]
    assert all(not n.startswith("backbone") for g in layout[:-1] for n in g["params"])
    lrs = lr_rows(tmp_path / "full")
    assert min(lrs["lr/backbone"]) > 10  # logged from the first log point after the add
    for step, lr in lrs["lr/backbone"].items():
        # The added group's lr is its peak, scaled by the same schedule as optim.lr's.
        assert lr == pytest.approx(lrs["lr"][step] / 3e-3 * 0.01, rel=1e-9), step
    assert not torch.equal(backbone_at(tmp_path / "full", -1), Net().backbone[0].weight)
    resumes_exactly(tmp_path, full, [8, 12, 24], "sched.warmup_steps=3",
                    fresh=lambda: {"callbacks": [Unfreeze(1, add=0.01)]})  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(
    "sched",
    [
        ["sched.name=torch.optim.lr_scheduler:CosineAnnealingLR", "sched.kwargs={T_max: 30}"],
        ["sched.name=torch.optim.lr_scheduler:OneCycleLR", "sched.kwargs={max_lr: 0.01}"],
        ["sched.name=torch.optim.lr_scheduler:StepLR", "sched.kwargs={step_size: 4}"],
    ],
)
def test_add_param_group_with_import_path_schedulers_resumes(tmp_path, sched):
    full = run(tmp_path / "full", *sched, callbacks=[Unfreeze(1, add=0.005)])
    assert "lr/backbone" in lr_rows(tmp_path / "full")
    resumes_exactly(tmp_path, full, [12], *sched,
                    fresh=lambda: {"callbacks": [Unfreeze(1, add=0.005)]})  # fmt: skip


@pytest.mark.slow
def test_a_one_cycle_schedule_keeps_the_groups_ratios(tmp_path):
    run(tmp_path / "a", "optim.groups=[{params: 'head.*', lr_scale: 4, name: head}]",
        "sched.name=torch.optim.lr_scheduler:OneCycleLR", "sched.kwargs={max_lr: 0.02}",
        model=Net(freeze=False))  # fmt: skip
    lrs = lr_rows(tmp_path / "a")
    assert max(lrs["lr"].values()) == pytest.approx(0.02, rel=0.05)
    for step, lr in lrs["lr"].items():
        assert lrs["lr/head"][step] == pytest.approx(4 * lr, rel=1e-9), step


@pytest.mark.slow
def test_changed_groups_on_resume_are_refused_in_one_line(tmp_path):
    run(tmp_path / "full", "optim.groups=[{params: 'head.*', lr_scale: 2}]")
    with pytest.raises(UserError, match="other parameter groups"):
        run(tmp_path / "again", "optim.groups=[{params: 'backbone.*', lr_scale: 2}]",
            resume=tmp_path / "full" / "checkpoints" / "step-4.pt")  # fmt: skip


# ---- fit(optimizer=, scheduler=) --------------------------------------------------------


@pytest.mark.slow
def test_fit_takes_an_optimizer_instance_and_a_scheduler_factory_and_resumes(tmp_path):
    def parts():
        net = Net(freeze=False)
        opt = torch.optim.SGD(
            [
                {"params": net.backbone.parameters(), "lr": 0.01, "name": "bb"},
                {"params": net.head.parameters()},
            ],
            lr=0.1,
            momentum=0.9,
        )
        return {
            "model": net,
            "optimizer": opt,
            "scheduler": lambda o: torch.optim.lr_scheduler.StepLR(o, 5, gamma=0.5),
        }

    full = run(tmp_path / "full", **parts())
    lrs = lr_rows(tmp_path / "full")
    assert lrs["lr/bb"][30] == pytest.approx(0.01 * 0.5**6)
    assert lrs["lr"][30] == pytest.approx(0.01 * 0.5**6)  # the first group's
    resumes_exactly(tmp_path, full, [8, 20], fresh=parts)


@pytest.mark.slow
def test_fit_takes_an_optimizer_factory_with_the_configured_schedule(tmp_path):
    def factory(model):
        return torch.optim.AdamW(model.parameters(), lr=0.004, weight_decay=0.0)

    result = run(tmp_path / "a", "sched.warmup_steps=4", model=Net(freeze=False),
                 optimizer=factory)  # fmt: skip
    lrs = lr_rows(tmp_path / "a")["lr"]
    assert lrs[2] == pytest.approx(0.004 * 3 / 4)  # warmup of the factory's lr
    assert result.metrics["val/accuracy"] > 0.5


@pytest.mark.slow
def test_fit_refuses_an_optimizer_over_another_model_and_a_foreign_scheduler(tmp_path):
    other = Net(freeze=False)
    with pytest.raises(UserError, match="parameters are not the model's"):
        run(tmp_path / "a", optimizer=torch.optim.SGD(other.parameters(), lr=0.1))
    net = Net(freeze=False)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    foreign = torch.optim.lr_scheduler.StepLR(torch.optim.SGD(other.parameters(), lr=1), 3)
    with pytest.raises(UserError, match="belongs to another optimizer"):
        run(tmp_path / "b", model=net, optimizer=opt, scheduler=foreign)
    with pytest.raises(UserError, match="factory returned int"):
        run(tmp_path / "c", optimizer=lambda m: 3)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


# ---- the doctor ------------------------------------------------------------------------


@pytest.mark.slow
def test_doctor_finds_a_part_unfrozen_outside_the_users_optimizer(tmp_path):
    def factory(model):  # the usual pre-trainwell code: trainable parameters only
        return torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.01)

    result = run(tmp_path / "a", optimizer=factory, callbacks=[Unfreeze(1)])
    doctor = (result.run_dir / "doctor.json").read_text()
    assert "param-not-in-optimizer" in doctor and "backbone[0].weight" in doctor
    assert "unfrozen after it was built" in doctor
    assert torch.equal(result.model.backbone[0].weight, Net().backbone[0].weight)
    # The engine's own optimizer holds the frozen part: nothing to report.
    result = run(tmp_path / "b", callbacks=[Unfreeze(1)])
    assert "param-not-in-optimizer" not in (result.run_dir / "doctor.json").read_text()
