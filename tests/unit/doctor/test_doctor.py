"""The doctor on a corpus of small real scripts: the exact code and line of every
expected finding (``# expect: CODE`` comments), and silence on correct code."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

import trainwell
from trainwell.cli import main

CORPUS = Path(__file__).resolve().parents[2] / "doctor_corpus"
SCRIPTS = sorted(p for p in CORPUS.glob("*.py") if not p.name.startswith("_"))
# The longer scripts are marked slow: the fast lane (-m "not slow") runs the others.
SLOW_SCRIPTS = {
    line.strip()
    for line in (CORPUS / "_slow.txt").read_text().splitlines()
    if line.strip() and not line.startswith("#")
}
CASES = [pytest.param(p, marks=pytest.mark.slow) if p.stem in SLOW_SCRIPTS else p for p in SCRIPTS]
EXPECT = re.compile(r"#\s*expect(-related)?:\s*([a-z-]+)")
# A script's own doctor options, e.g. ``# doctor-args: --max-steps 40`` (a run cut short).
DOCTOR_ARGS = re.compile(r"^#\s*doctor-args:(.*)$", re.MULTILINE)


def expectations(script: Path) -> tuple[set[tuple[str, int]], set[tuple[str, int]]]:
    found, related = set(), set()
    for lineno, text in enumerate(script.read_text().splitlines(), start=1):
        for m in EXPECT.finditer(text):
            (related if m.group(1) else found).add((m.group(2), lineno))
    return found, related


def test_every_slow_script_is_in_the_corpus():
    unknown = SLOW_SCRIPTS - {p.stem for p in SCRIPTS}
    assert not unknown, f"tests/doctor_corpus/_slow.txt names no script: {unknown}"


@pytest.mark.parametrize("script", CASES, ids=lambda p: p.stem)
def test_corpus(script, tmp_path, capsys):
    out = tmp_path / "findings.json"
    options = [a for m in DOCTOR_ARGS.finditer(script.read_text()) for a in m.group(1).split()]
    code = main(["doctor", *options, "--json", str(out), str(script)])
    # crash_* scripts crash as they would under python; the report explains why.
    expected_code = 1 if script.name.startswith("crash_") else 0
    assert code == expected_code, capsys.readouterr().err
    report = json.loads(out.read_text())
    findings = [f for f in report["findings"] if f["severity"] in ("warning", "error")]
    got = {(f["code"], f["line"]) for f in findings}
    expected, expected_related = expectations(script)
    assert got == expected, capsys.readouterr().err
    assert all(Path(f["file"]).resolve() == script.resolve() for f in findings)
    for code_, line in expected_related:
        finding = next(f for f in findings if f["code"] == code_)
        assert {"file": str(script), "line": line} in [
            {"file": r["file"], "line": r["line"]} for r in finding["related"]
        ]
    assert report["exit_code"] == expected_code


def test_report_is_printed_as_blocks(capsys):
    main(["doctor", str(CORPUS / "leak_list_append.py")])
    err = capsys.readouterr().err
    assert "error[graph-retained] " in err and "leak_list_append.py:13" in err
    assert "fix: store loss.item()" in err


def test_max_steps_stops_the_script_and_keeps_the_report(tmp_path, capsys):
    out = tmp_path / "f.json"
    code = main(["doctor", "--max-steps", "5", "--json", str(out),
                 str(CORPUS / "leak_list_append.py")])  # fmt: skip
    report = json.loads(out.read_text())
    assert code == 0 and report["steps"] == 5 and report["stopped_early"] is True
    assert "(stopped at --max-steps)" in capsys.readouterr().err


def test_script_args_exit_code_and_crash_pass_through(tmp_path, capsys):
    script = tmp_path / "s.py"
    script.write_text("import sys\nprint('args', sys.argv[1:])\nsys.exit(int(sys.argv[1]))\n")
    assert main(["doctor", str(script), "3", "--flag"]) == 3
    assert "args ['3', '--flag']" in capsys.readouterr().out
    crash = tmp_path / "c.py"
    crash.write_text("raise RuntimeError('boom')\n")
    assert main(["doctor", str(crash)]) == 1
    err = capsys.readouterr().err
    assert "RuntimeError: boom" in err and "trainwell doctor: 0 optimizer steps" in err


def test_missing_script_is_one_line(capsys):
    assert main(["doctor", "nope.py"]) == 2
    assert (
        capsys.readouterr().err.strip() == "trainwell: error: doctor: script nope.py does not exist"
    )


def test_watch_around_a_hand_written_loop_and_hooks_removed():
    backward = torch.Tensor.backward
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    kept = []
    with trainwell.doctor.watch() as doc:
        for _ in range(6):
            opt.zero_grad()
            loss = model(torch.randn(8, 4)).pow(2).mean()
            loss.backward()
            opt.step()
            kept.append(loss)
    assert [f.code for f in doc.findings] == ["graph-retained"]
    assert "graph-retained" in doc.report()
    assert torch.Tensor.backward is backward
    assert not torch.nn.modules.module._global_forward_hooks


LEAKY_MODEL = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, num_classes=4, input_shape=(8,)):
        super().__init__()
        self.body = nn.Linear(8, num_classes)
        self.outputs = []

    def forward(self, x):
        out = self.body(x)
        self.outputs.append(out)
        return out
"""


@pytest.mark.slow
def test_the_engine_runs_the_doctor_and_writes_doctor_json(cli, tmp_path):
    from tests.conftest import SYNTHETIC

    (tmp_path / "leaky.py").write_text(LEAKY_MODEL)
    base = [a for a in SYNTHETIC if not a.startswith("model.")]
    code, out, err = cli("train", *base, "model.name=leaky:Net", "train.epochs=1", "run.dir=run")
    assert code == 0, err
    findings = json.loads((tmp_path / "run" / "doctor.json").read_text())["findings"]
    assert [(f["code"], Path(f["file"]).name, f["line"]) for f in findings] == [
        ("graph-retained", "leaky.py", 14)
    ]
    assert "error[graph-retained]" in out  # printed as it appeared
    code, _, err = cli("train", *SYNTHETIC, "train.epochs=1", "run.dir=clean")
    assert code == 0, err
    assert json.loads((tmp_path / "clean" / "doctor.json").read_text())["findings"] == []
    code, _, err = cli("train", *SYNTHETIC, "train.epochs=1", "run.dir=off", "doctor.enabled=false")
    assert code == 0 and not (tmp_path / "off" / "doctor.json").exists()


STEP_MODULES = {
    # a module-level list
    "keep_list": (
        "import torch.nn.functional as F\n\nHISTORY = []\n\n\n"
        "def step(model, batch):\n    x, y = batch\n    loss = F.cross_entropy(model(x), y)\n"
        "    HISTORY.append(loss)\n    return loss\n",
        9,
    ),
    # an object of the module's own class, at module level
    "keep_tracker": (
        "import torch.nn.functional as F\n\n\nclass Tracker:\n    def __init__(self):\n"
        "        self.losses = []\n\n\nTRACK = Tracker()\n\n\ndef step(model, batch):\n"
        "    out = model(batch[0])\n    loss = F.cross_entropy(out, batch[1])\n"
        "    TRACK.losses.append(loss)\n    return {'loss': loss}\n",
        15,
    ),
    # a dict of lists, the running total summed with the tensor
    "keep_total": (
        "import torch.nn.functional as F\n\nSTATS = {'total': 0.0}\n\n\n"
        "def step(model, batch):\n    loss = F.cross_entropy(model(batch[0]), batch[1])\n"
        "    STATS['total'] += loss\n    return loss\n",
        8,
    ),
}


@pytest.mark.parametrize("name", sorted(STEP_MODULES))
def test_the_engine_finds_a_step_module_keeping_its_losses(cli, tmp_path, name):
    # The engine's frames, not the user's, run the step: the step module's variables
    # are scanned all the same, and the finding points at the step file's line.
    from tests.conftest import SYNTHETIC

    text, line = STEP_MODULES[name]
    (tmp_path / f"{name}.py").write_text(text)
    code, _, err = cli("train", *SYNTHETIC, f"train.step={name}:step", "train.epochs=1",
                       "run.dir=run")  # fmt: skip
    assert code == 0, err
    findings = json.loads((tmp_path / "run" / "doctor.json").read_text())["findings"]
    assert [(f["code"], Path(f["file"]).name, f["line"]) for f in findings] == [
        ("graph-retained", f"{name}.py", line)
    ]


def train_with_memory_samples(samples, probe_class):
    """100 optimizer steps watched by a memory probe reading (allocated, reserved) from
    ``samples`` instead of CUDA."""
    series = iter(samples)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    doc = trainwell.doctor.Doctor(probes=[probe_class(sample=lambda: next(series))])
    with doc:
        for _ in range(100):
            opt.zero_grad()
            model(torch.randn(2, 4)).sum().backward()
            opt.step()  # the line the finding points at
    return doc


def test_allocator_fragmentation_from_sampled_memory():
    from trainwell.doctor.memory import fragmentation
    from trainwell.doctor.probes.allocator_fragmentation import AllocatorFragmentationProbe

    assert fragmentation([(1000, 2000 + 300 * i) for i in range(10)])
    assert not fragmentation([(1000 + 300 * i, 2000 + 300 * i) for i in range(10)])  # a leak
    assert not fragmentation([(1000, 2000)] * 10)  # steady
    assert not fragmentation([(1000, 2000 + 300 * i) for i in range(5)])  # too early to say
    doc = train_with_memory_samples([(1000, 2000 + 500 * i) for i in range(100)],
                                    AllocatorFragmentationProbe)  # fmt: skip
    source = Path(__file__).read_text().splitlines()
    line = next(i for i, t in enumerate(source, 1) if "# the line the finding points at" in t)
    assert [(f.code, f.line) for f in doc.findings] == [("allocator-fragmentation", line)]
    assert "expandable_segments:True" in doc.findings[0].fix


@pytest.mark.slow
def test_the_readme_examples_report_what_the_readme_shows(tmp_path):
    examples = Path(__file__).resolve().parents[3] / "examples"
    for name, expected in [
        ("leaky_train.py", [("graph-retained", 33), ("eval-builds-graph", 38)]),
        ("fixed_train.py", []),
    ]:
        out = tmp_path / f"{name}.json"
        assert main(["doctor", "--max-steps", "60", "--json", str(out), str(examples / name)]) == 0
        findings = json.loads(out.read_text())["findings"]
        assert [(f["code"], f["line"]) for f in findings] == expected, name


def test_the_frame_sends_every_training_event_and_restores_everything():
    from torch.utils.data import DataLoader, TensorDataset

    class Recorder:
        def __init__(self):
            self.events = []

        def __getattr__(self, name):
            if name.startswith("on_"):
                return lambda doc, *event: self.events.append(name)
            raise AttributeError(name)

    from torch.optim import lr_scheduler

    originals = (torch.Tensor.backward, torch.optim.Optimizer.zero_grad,
                 torch.optim.Optimizer.__init__, lr_scheduler.LRScheduler.step,
                 lr_scheduler.LRScheduler.__init__, torch.nn.Module.__call__,
                 torch.nn.Module.train, torch.nn.functional.cross_entropy,
                 torch.amp.GradScaler.step, torch.amp.GradScaler.update)  # fmt: skip
    rec = Recorder()
    with trainwell.doctor.Doctor(probes=[rec]):
        model = torch.nn.Linear(4, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        sched = lr_scheduler.StepLR(opt, 1)
        scaler = torch.amp.GradScaler("cpu")
        loader = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4)
        model.train()
        for (x,) in loader:
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), torch.zeros(4, dtype=torch.long))
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        sched.step()
        with torch.no_grad():
            model(x)
    steps = ["on_batch", "on_zero_grad", "on_forward", "on_loss", "on_backward",
             "on_scaler_step", "on_pre_step", "on_step", "on_scaler_update"]  # fmt: skip
    # The step StepLR's constructor takes is not an event; a forward under no_grad is
    # an on_forward, then an on_nograd_forward.
    assert rec.events == ["on_optimizer_created", "on_scheduler_created", "on_mode", *steps,
                          *steps, "on_epoch_end", "on_scheduler_step", "on_forward",
                          "on_nograd_forward", "on_end"]  # fmt: skip
    assert originals == (torch.Tensor.backward, torch.optim.Optimizer.zero_grad,
                         torch.optim.Optimizer.__init__, lr_scheduler.LRScheduler.step,
                         lr_scheduler.LRScheduler.__init__, torch.nn.Module.__call__,
                         torch.nn.Module.train, torch.nn.functional.cross_entropy,
                         torch.amp.GradScaler.step, torch.amp.GradScaler.update)  # fmt: skip


def test_allocated_memory_climbing_without_a_named_holder_is_a_leak():
    from trainwell.doctor.memory import climbing
    from trainwell.doctor.probes.tensor_accumulation import TensorAccumulationProbe

    assert climbing([(1000 + 300 * i, 5000) for i in range(10)])
    assert not climbing([(1000, 5000)] * 10)
    assert not climbing([(1000 + 300 * (i % 2), 5000) for i in range(10)])  # oscillates
    doc = train_with_memory_samples([(1000 + 400 * i, 9000) for i in range(100)],
                                    TensorAccumulationProbe)  # fmt: skip
    assert [f.code for f in doc.findings] == ["tensor-accumulation"]
    assert "could not name what holds it" in doc.findings[0].message


def test_a_failing_probe_never_breaks_training():
    class Broken:
        def on_step(self, doc, event):
            raise ValueError("probe bug")

    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with trainwell.doctor.Doctor(probes=[Broken()]) as doc:
        for _ in range(3):
            opt.zero_grad()
            model(torch.randn(2, 4)).sum().backward()
            opt.step()
    assert doc.steps == 3
    assert doc.errors == ["Broken: ValueError: probe bug"]  # reported once, then switched off


def test_watch_given_the_model_and_the_evidence_in_bytes():
    model = torch.nn.Linear(4, 2)
    model.kept = []
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with trainwell.doctor.watch(model=model, optimizer=opt) as doc:
        for _ in range(6):
            opt.zero_grad()
            out = model(torch.randn(8, 4))
            model.kept.append(out)
            out.sum().backward()
            opt.step()
    (finding,) = doc.findings
    assert finding.code == "graph-retained" and "kept" in finding.message
    assert finding.evidence["bytes_held"] == finding.evidence["tensors_with_graph"] * 8 * 2 * 4
