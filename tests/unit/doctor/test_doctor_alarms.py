"""The false alarms of issue 24 on the corpus's published-style scripts, under the
conditions that raised them: a policy-gradient run cut by --max-steps at any point,
and what each finding says (the loader named, generation noted as info)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainwell.cli import main

CORPUS = Path(__file__).resolve().parents[2] / "doctor_corpus"


def report(tmp_path: Path, script: str, *options: str) -> dict:
    out = tmp_path / "f.json"
    assert main(["doctor", *options, "--json", str(out), str(CORPUS / script)]) == 0
    return json.loads(out.read_text())


def loud(findings: list[dict]) -> list[tuple[str, int]]:
    return [(f["code"], f["line"]) for f in findings if f["severity"] in ("warning", "error")]


@pytest.mark.slow
@pytest.mark.parametrize(("script", "steps"), [
    ("ok_reinforce_cartpole_del_slice.py", 12), ("ok_reinforce_cartpole_del_slice.py", 60),
    ("ok_reinforce_cartpole_clear.py", 9), ("ok_reinforce_rebind_per_episode.py", 17),
    ("ok_actor_critic_cartpole.py", 20),
])  # fmt: skip
def test_episode_buffers_emptied_each_episode_are_no_leak_wherever_the_run_is_cut(
    tmp_path, script, steps
):
    r = report(tmp_path, script, "--max-steps", str(steps))
    assert r["steps"] == steps and loud(r["findings"]) == []


@pytest.mark.slow
def test_a_list_that_never_empties_is_still_a_leak_when_cut_early(tmp_path):
    r = report(tmp_path, "leak_reinforce_loss_history.py", "--max-steps", "12")
    [finding] = [f for f in r["findings"] if f["severity"] == "error"]
    assert finding["code"] == "graph-retained" and "`loss_history`" in finding["message"]


@pytest.mark.slow
def test_the_sampler_finding_names_the_training_loader_and_its_sampler(tmp_path):
    r = report(tmp_path, "sampler_helper_loop_set_epoch_on_val.py")
    [finding] = r["findings"]
    assert "`train_loader` (built at line 17)" in finding["message"]
    assert finding["fix"].startswith("call train_sampler.set_epoch(epoch)")
    assert finding["evidence"]["loader"] == "train_loader"


@pytest.mark.slow
def test_generation_after_training_is_noted_as_info(tmp_path):
    r = report(tmp_path, "ok_generate_once_small_gpt.py")
    [finding] = r["findings"]
    assert finding["code"] == "eval-builds-graph" and finding["severity"] == "info"
    assert "run once" in finding["message"]
