"""A script the doctor runs in-process leaves no process-wide setting behind: its
``mp.set_start_method`` and its anomaly mode end with it (a later script's DataLoader
workers would otherwise start with the first one's method)."""

from __future__ import annotations

import multiprocessing

import torch

from trainwell.cli import main

SCRIPT = """
import torch
import torch.multiprocessing as mp

mp.set_start_method("spawn", force=True)
torch.autograd.set_detect_anomaly(True)
"""


def test_the_scripts_process_settings_end_with_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "settings.py").write_text(SCRIPT)
    before = multiprocessing.get_start_method(allow_none=True)
    assert main(["doctor", str(tmp_path / "settings.py")]) == 0
    assert multiprocessing.get_start_method(allow_none=True) == before
    assert not torch.is_anomaly_enabled()
