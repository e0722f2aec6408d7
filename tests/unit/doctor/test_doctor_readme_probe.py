"""The README's example probe runs as written: alone in a Doctor, it names the line of an
optimizer step taken with a learning rate of 0, and says nothing when the lr is not 0."""

from __future__ import annotations

import re
from pathlib import Path

import torch

from tests.docs_pages import page
from trainwell.doctor.frame import Doctor

README = page("doctor/writing-a-probe.md")  # moved there from the README


def probe_class():
    (code,) = re.findall(r"```python\n(from trainwell.doctor.events import .*?)```", README,
                         flags=re.S)  # fmt: skip
    namespace: dict = {}
    exec(code, namespace)  # noqa: S102 - the README's own example
    return namespace["ZeroLrProbe"]


def train(lr: float) -> Doctor:
    doc = Doctor(probes=[probe_class()()])
    with doc:
        model = torch.nn.Linear(3, 1)
        opt = torch.optim.SGD(model.parameters(), lr=lr)
        for _ in range(3):
            opt.zero_grad()
            model(torch.randn(4, 3)).pow(2).mean().backward()
            opt.step()  # the line the finding names
    return doc


def test_the_readme_probe_names_the_step_line():
    (finding,) = train(0.0).findings
    lines = Path(__file__).read_text().splitlines()
    assert finding.code == "zero-lr" and finding.file.endswith("test_doctor_readme_probe.py")
    assert lines[finding.line - 1].strip().startswith("opt.step()")


def test_the_readme_probe_is_silent_with_a_learning_rate():
    assert train(0.1).findings == []
