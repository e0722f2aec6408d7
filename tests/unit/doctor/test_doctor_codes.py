"""The codes catalog agrees with the code and the README, and the issue-24 findings
(DataParallel, anomaly mode, torch.save of a module, clipping out of order, label-sorted
data, CUDA in ``__getitem__``, dead workers, ``.numpy()`` on a grad tensor, in-place on a
leaf) hold on small in-process cases beside their corpus scripts."""

from __future__ import annotations

import ast
import doctest
import importlib
import re
from pathlib import Path

import pytest
import torch
from torch import nn

from trainwell.doctor.codes import CODES, SEVERITY
from trainwell.doctor.crash import explain
from trainwell.doctor.frame import Doctor
from trainwell.doctor.registry import default_probes

REPO = Path(__file__).resolve().parents[3]
DOCTOR = REPO / "trainwell" / "doctor"
NEW = ("data-parallel", "anomaly-mode-on", "save-whole-model", "clip-before-backward",
       "sorted-labels-no-shuffle", "cuda-in-getitem", "dataloader-worker-died",
       "numpy-on-grad-tensor", "inplace-on-leaf")  # fmt: skip


def emitted_codes() -> dict[str, str]:
    """code -> file:line of every finding code written in trainwell/doctor: ``code=``
    arguments, ``CODE = "..."``, the first argument of ``Finding(...)``/``Cause(...)``,
    ``severity("...")``."""
    found: dict[str, str] = {}
    for path in DOCTOR.rglob("*.py"):
        if path.name == "codes.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            texts = []
            code_kw = isinstance(node, ast.keyword) and node.arg == "code"
            constant = isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "CODE" for t in node.targets
            )
            if code_kw or constant:
                texts.append(node.value)
            elif isinstance(node, ast.Call) and node.args:
                name = getattr(node.func, "id", getattr(node.func, "attr", ""))
                if name in ("Finding", "Cause", "severity"):
                    texts.append(node.args[0])
            for t in texts:
                if isinstance(t, ast.Constant) and isinstance(t.value, str):
                    found.setdefault(t.value, f"{path.relative_to(REPO)}:{node.lineno}")
    return found


def readme_codes() -> set[str]:
    """The codes in the doctor's code table ("What it finds", docs/doctor/index.md, moved
    there from the README): in each row's second column, the backticked names outside
    parentheses (what is inside explains, or is a link's target)."""
    text = (REPO / "docs" / "doctor" / "index.md").read_text()
    table = text.split("What it finds (codes", 1)[1].split("\n\n", 2)[1]
    codes = set()
    for row in table.splitlines()[2:]:
        cell = row.split("|")[2]
        depth, outside = 0, ""
        for ch in cell:
            depth += ch == "("
            outside += ch if depth == 0 else ""
            depth -= ch == ")" and depth > 0
        codes.update(re.findall(r"`([a-z]+(?:-[a-z]+)*)`", outside))
    return codes


def listed_codes() -> dict[str, tuple[str, str, str]]:
    """docs/doctor/codes.md's table: code -> (link target, severity, summary)."""
    text = (REPO / "docs" / "doctor" / "codes.md").read_text()
    rows = re.findall(r"^\| \[`([a-z-]+)`\]\(([^)]+)\) \| (\w+) \| (.*) \|$", text, flags=re.M)
    return {code: (target, sev, summary) for code, target, sev, summary in rows}


def test_every_code_the_doctor_emits_is_in_the_catalog():
    emitted = emitted_codes()
    assert len(emitted) >= 30  # the scan finds the probes' codes at all
    missing = {c: where for c, where in emitted.items() if c not in CODES}
    assert not missing, f"codes emitted but not in trainwell/doctor/codes.py: {missing}"
    # ... and the other way round: the catalog (and so the docs) names no code that
    # nothing in the doctor can report.
    unused = set(CODES) - set(emitted)
    assert not unused, f"codes in the catalog that no probe or explainer emits: {unused}"


def test_the_catalog_matches_the_readme_table_and_its_docs_exist():
    assert readme_codes() == set(CODES)
    for code in CODES.values():
        assert code.severity in ("error", "warning", "info")
        assert re.fullmatch(r"[a-z]+(-[a-z]+)*", code.code)
        assert (REPO / code.doc.split("#")[0]).is_file(), code.doc
    for code in NEW:
        page = (REPO / CODES[code].doc).read_text()
        assert page.startswith(f"# `{code}`") and "```python" in page


def test_every_code_has_its_own_page_and_the_pages_agree_with_the_catalog():
    """One page per code (docs/doctor/<code>.md: what, why, fix, a minimal script that
    reports the code), each in the site's nav; the list of codes is the catalog's, row by
    row; and no page documents a code the catalog does not have."""
    assert listed_codes() == {c.code: (f"{c.code}.md", c.severity, c.summary)
                              for c in CODES.values()}  # fmt: skip
    nav = (REPO / "mkdocs.yml").read_text()
    for code in CODES.values():
        assert code.doc == f"docs/doctor/{code.code}.md"
        page = (REPO / code.doc).read_text()
        assert page.startswith(f"# `{code.code}`\n"), code.doc
        assert re.search(rf"\*\*Severity:\*\* {code.severity}[. ]", page), code.doc
        for section in ("## What", "## Why it matters", "## Fix", "## A minimal script"):
            assert f"\n{section}\n" in page, f"{code.doc}: no {section!r}"
        script = minimal_script(code.code)
        assert f"{code.severity}[{code.code}]" in script, f"{code.doc}: the script's marker"
        assert f"doctor/{code.code}.md" in nav, f"mkdocs.yml: {code.doc} not in the nav"
    others = {"index", "codes", "writing-a-probe"}
    pages = {p.stem for p in (REPO / "docs" / "doctor").glob("*.md")} - others
    assert pages == set(CODES), "pages of no code / codes without a page"


def minimal_script(code: str) -> str:
    """The python block under a page's "## A minimal script"."""
    page = (REPO / CODES[code].doc).read_text()
    return page.split("\n## A minimal script\n", 1)[1].split("```python\n", 1)[1].split("```")[0]


def test_the_new_probes_report_at_the_catalog_severity():
    # Their codes come from the catalog: a probe's CODE constant and severity agree.
    for code in NEW[:6]:
        module = importlib.import_module(f"trainwell.doctor.probes.{code.replace('-', '_')}")
        assert code == module.CODE and code in SEVERITY
    classes = {type(p).__name__ for p in default_probes()}
    assert {"DataParallelProbe", "AnomalyModeOnProbe", "SaveWholeModelProbe",
            "ClipBeforeBackwardProbe", "SortedLabelsNoShuffleProbe",
            "CudaInGetitemProbe"} <= classes  # fmt: skip


@pytest.mark.parametrize("name", ["codes", "probes.save_whole_model", "probes.cuda_in_getitem",
                                  "probes.sorted_labels_no_shuffle"])  # fmt: skip
def test_docstring_examples(name):
    module = importlib.import_module(f"trainwell.doctor.{name}")
    assert doctest.testmod(module, verbose=False).failed == 0


# ---- the probes in process --------------------------------------------------------------


def train(steps, clip=None, model=None, anomaly_steps=0):
    """A tiny loop; ``clip``: "before" / "after-step" / "right" places the clipping."""
    torch.manual_seed(0)
    model = model or nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(steps):
        opt.zero_grad()
        loss = model(torch.randn(8, 4)).pow(2).mean()
        if clip == "before":
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if i < anomaly_steps:
            with torch.autograd.detect_anomaly():
                loss.backward()
        else:
            loss.backward()
        if clip == "right":
            torch.nn.utils.clip_grad_value_(model.parameters(), 0.5)
        opt.step()
        if clip == "after-step":
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)


def codes_of(doc):
    return sorted(f.code for f in doc.findings if f.severity != "info")


@pytest.mark.parametrize("clip, expected", [("before", ["clip-before-backward"]),
                                            ("after-step", ["clip-before-backward"]),
                                            ("right", []), (None, [])])  # fmt: skip
def test_clipping_order(clip, expected):
    with Doctor() as doc:
        train(12, clip=clip)
    assert codes_of(doc) == expected
    if expected:
        finding = doc.findings[0]
        assert ("after" in finding.message) == (clip == "after-step")


def test_anomaly_mode_briefly_is_fine_and_left_on_is_not():
    with Doctor() as doc:
        train(20, anomaly_steps=2)
    assert codes_of(doc) == []
    with Doctor() as doc:
        train(20, anomaly_steps=15)
    assert codes_of(doc) == ["anomaly-mode-on"]
    torch.autograd.set_detect_anomaly(True)  # on, and still on at the end of a short run
    try:
        with Doctor() as doc:
            train(4)
    finally:
        torch.autograd.set_detect_anomaly(False)
    assert codes_of(doc) == ["anomaly-mode-on"]


def test_torch_save_of_modules_and_of_state_dicts(tmp_path):
    model = nn.Linear(3, 1)
    opt = torch.optim.Adam(model.parameters())
    with Doctor() as doc:
        torch.save(model.state_dict(), tmp_path / "a.pt")
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": 3},
                   tmp_path / "b.pt")  # fmt: skip
        torch.save([torch.ones(2)], tmp_path / "c.pt")
    assert codes_of(doc) == []
    with Doctor() as doc:
        torch.save({"nets": {"g": model}}, tmp_path / "d.pt")
        torch.save(opt, tmp_path / "e.pt")
    assert codes_of(doc) == ["save-whole-model"] * 2
    assert "`model` (Linear)" in doc.findings[0].message
    assert "optimizer" in doc.findings[1].message


def test_data_parallel_and_patches_come_off():
    originals = (torch.save, torch.set_anomaly_enabled, nn.DataParallel.__init__,
                 nn.utils.clip_grad_norm_, torch.nn.utils.clip_grad.clip_grad_value_)  # fmt: skip
    with Doctor() as doc:
        wrapped = nn.DataParallel(nn.Linear(4, 2))
        train(3, model=wrapped)
    assert codes_of(doc) == ["data-parallel"]
    assert (torch.save, torch.set_anomaly_enabled, nn.DataParallel.__init__,
            nn.utils.clip_grad_norm_, torch.nn.utils.clip_grad.clip_grad_value_) == originals


def test_clip_of_a_generator_still_clips():
    model = nn.Linear(4, 2)
    model(torch.randn(3, 4)).sum().mul(100).backward()
    with Doctor():
        norm = nn.utils.clip_grad_norm_((p for p in model.parameters()), 1.0)
        norm = nn.utils.clip_grad_norm_((p for p in model.parameters()), 1.0)
    assert float(norm) <= 1.0 + 1e-4


HEAD = "def __getitem__(self, i):\n"
GETITEM_CASES = {
    HEAD + "    return self.x[i].cuda()\n": [".cuda()"],
    HEAD + "    return self.x[i].to('cuda:1', non_blocking=True)\n": [".to('cuda:1')"],
    HEAD + "    return self.x[i].to(DEVICE), self.y[i]\n": [".to(DEVICE)"],
    HEAD + "    return torch.tensor(self.ids[i], device=torch.device('cuda'))\n":
        ["device=torch.device('cuda')"],
    HEAD + "    x = self.x[i]\n    return x.to(torch.float32), x.to(x.device)\n": [],
    HEAD + "    return self.x[i].to(self.dtype), torch.zeros(2, device='cpu')\n": [],
}  # fmt: skip


@pytest.mark.parametrize("source", sorted(GETITEM_CASES))
def test_gpu_calls_in_getitem_source(source):
    from trainwell.doctor.probes.cuda_in_getitem import gpu_calls

    found = [what for _, what in gpu_calls(ast.parse(source).body[0])]
    assert found == GETITEM_CASES[source]


def test_sorted_label_orders():
    from trainwell.doctor.probes.sorted_labels_no_shuffle import sorted_runs

    g = torch.Generator().manual_seed(0)
    assert sorted_runs(torch.arange(5).repeat_interleave(40)) == (5, 5)
    assert sorted_runs(torch.arange(3).repeat_interleave(30).repeat(2)) == (3, 6)
    shuffled = torch.arange(5).repeat_interleave(40)[torch.randperm(200, generator=g)]
    assert sorted_runs(shuffled) is None
    rare = torch.zeros(1000, dtype=torch.long)
    rare[torch.randint(0, 1000, (3,), generator=g)] = 1  # imbalanced, not sorted
    assert sorted_runs(rare) is None
    stray = torch.cat([torch.zeros(50), torch.ones(1), torch.zeros(49)]).long()
    assert sorted_runs(stray) is None
    assert sorted_runs(torch.linspace(0, 1, 100)) is None  # a regression target
    assert sorted_runs(torch.ones(100, dtype=torch.long)) is None  # one class


# ---- crash explanations in process --------------------------------------------------------


def crash(fn):
    doc = Doctor(probes=[])
    with doc:
        try:
            fn()
        except RuntimeError as exc:
            explain(doc, exc)
    return doc.findings


def test_numpy_on_a_grad_tensor_is_explained_at_its_line():
    w = nn.Linear(2, 2).weight
    findings = crash(lambda: w.numpy())
    assert [(f.code, f.line) for f in findings] == [("numpy-on-grad-tensor", line_of("w.numpy()"))]
    assert "w.detach().cpu().numpy()" in findings[0].fix


def test_inplace_on_a_leaf_is_explained_at_its_line():
    w = torch.zeros(3, requires_grad=True)

    def update():
        w.add_(1.0)

    findings = crash(update)
    assert [(f.code, f.line) for f in findings] == [("inplace-on-leaf", line_of("w.add_(1.0)"))]
    assert "requires_grad_()" in findings[0].fix


def line_of(text: str) -> int:
    lines = Path(__file__).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.strip().startswith(text)
                or f"lambda: {text}" in line)  # fmt: skip


# ---- the docs pages' examples ---------------------------------------------------------------

MARK = re.compile(r"#\s*(?:warning|error)\[([a-z-]+)\]")


def page_examples() -> list[tuple[str, int]]:
    """(code, index) of every python block of every code's page: each is run as written."""
    found = []
    for code in CODES:
        text = (REPO / CODES[code].doc).read_text()
        found += [(code, i) for i in range(text.count("```python\n"))]
    return found


# Workers started by spawn import torch anew: slow here; the corpus runs that case
# (ok_worker_spawn_with_main_guard.py). The page's minimal script (fork) runs.
NOT_RUN = {("dataloader-worker-died", 0)}


@pytest.mark.slow
@pytest.mark.parametrize("code, index", [e for e in page_examples() if e not in NOT_RUN])
def test_each_docs_page_example_reports_what_it_says(code, index, tmp_path, monkeypatch, capsys):
    """Every python block of a code's page, run as written under ``trainwell doctor``,
    reports exactly the codes at the lines it marks (``# error[code]``): the minimal
    script its code, a fix nothing."""
    import json

    from trainwell.cli import main

    page = (REPO / CODES[code].doc).read_text()
    source = page.split("```python\n")[index + 1].split("```", 1)[0]
    script = tmp_path / f"{code.replace('-', '_')}_example.py"
    script.write_text(source)
    expected = {(m.group(1), i) for i, line in enumerate(source.splitlines(), 1)
                if not line.lstrip().startswith("#") for m in MARK.finditer(line)}  # fmt: skip
    monkeypatch.chdir(tmp_path)  # the examples write their checkpoints here
    if code == "allocator-fragmentation" and not torch.cuda.is_available():
        fake_cuda_memory(monkeypatch)
    out = tmp_path / "f.json"
    main(["doctor", "--json", str(out), str(script)])
    findings = json.loads(out.read_text())["findings"]
    got = {(f["code"], f["line"]) for f in findings if f["severity"] != "info"}
    assert got == expected, capsys.readouterr().err


def fake_cuda_memory(monkeypatch):
    """Without CUDA there is no allocator to sample: feed the probe the series a
    fragmenting allocator gives (reserved climbing, allocated flat), so that the page's
    script is still checked for the finding at its line."""
    from trainwell.doctor.probes.allocator_fragmentation import AllocatorFragmentationProbe

    samples = iter(range(10**6))
    series = lambda: (10**6, 2 * 10**6 + 5 * 10**5 * next(samples))  # noqa: E731
    monkeypatch.setattr(AllocatorFragmentationProbe.__init__, "__defaults__", (series,))
