"""Export to ONNX, TorchScript and safetensors, each checked for parity against PyTorch.

The default CNN, the MLP and user models (a GRU language model with dict batches and
variable lengths, a two-input model) go through each format; parity runs at batch 1 and
odd sizes the export never saw. ONNX exports run in a separate process (the CLI's main):
torch.export leaves fake tensors alive in the process that ran it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
import torch

import trainwell
from tests.conftest import REPO
from trainwell.export import load_model

CODE = "tests.tasks_code"
USER_MODELS = textwrap.dedent('''
    """Models a user might train, each with a trap for one export path."""
    import torch
    from torch import nn
    from torch.utils.data import TensorDataset


    class Branchy(nn.Module):
        def __init__(self, input_shape=(8,), num_classes=3):
            super().__init__()
            self.lin = nn.Linear(input_shape[0], num_classes)

        def forward(self, x):
            if x.mean() > 0:  # data-dependent: a trace keeps one branch
                return self.lin(x)
            return -self.lin(x)


    class FrozenBatch(Branchy):
        def forward(self, x):
            return self.lin(x) * (len(x) / 4)  # a Python number: traced as a constant


    class Eigen(Branchy):
        def forward(self, x):
            h = self.lin(x)
            return h + torch.linalg.eigvalsh(h[:, :, None] * h[:, None, :])


    def signed_data():
        # The first sample's mean is positive, that of the first four negative.
        x = torch.ones(64, 8)
        x[1:4] *= -3
        y = torch.arange(64) % 3
        return TensorDataset(x, y), TensorDataset(x.clone(), y.clone())
''')

RUNS = {
    "cnn": ["train.max_steps=3"],
    "mlp": ["data.name=synthetic", "data.kwargs.num_samples=256", "data.kwargs.shape=[8]",
            "model.name=mlp", "model.kwargs.hidden=[16]", "train.max_steps=3"],
    "lm": [f"data.name={CODE}:make_lm_data", f"data.collate={CODE}:pad",
           f"model.name={CODE}:make_lm", f"train.step={CODE}:lm_step", "data.batch_size=16",
           "train.max_steps=3"],
    "two": [f"data.name={CODE}:make_two_inputs", f"model.name={CODE}:TwoTowers",
            f"train.step={CODE}:two_input_step", "data.batch_size=32", "train.max_steps=3"],
    **{name: ["data.name=user_models:signed_data", f"model.name=user_models:{cls}",
              "data.batch_size=16", "train.max_steps=2"]
       for name, cls in (("branchy", "Branchy"), ("frozen", "FrozenBatch"), ("eigen", "Eigen"))},
}  # fmt: skip
INPUT_NAMES = {"cnn": ["input"], "mlp": ["input"], "lm": ["ids"], "two": ["a", "b"]}
GOOD = ("cnn", "mlp", "lm", "two")

# Runs trainwell.cli.main on each argv in one fresh process; prints the results as JSON.
DRIVER = textwrap.dedent("""
    import contextlib, io, json, sys
    from trainwell.cli import main
    from trainwell.export import to_onnx
    results = {}
    for name, argv in json.loads(sys.argv[1]).items():
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            if argv[0] == "api":
                code = [r.batch for r in to_onnx(argv[1], argv[2], opset=18).parity.rows]
            else:
                code = main(argv)
        results[name] = {"code": code, "out": out.getvalue(), "err": err.getvalue()}
    print(json.dumps(results))
""")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    (root / "user_models.py").write_text(USER_MODELS)
    sys.path.insert(0, str(root))
    try:
        for name, overrides in RUNS.items():
            cfg = trainwell.load_config(overrides=[*overrides, f"run.dir={root / name}",
                                                   "train.precision=fp32"])  # fmt: skip
            trainwell.fit(cfg)
        yield root
    finally:
        sys.path.remove(str(root))
        sys.modules.pop("user_models", None)


@pytest.fixture(scope="module")
def onnx_cli(runs):
    jobs = {name: ["export", name, "--format", "onnx", "--out", f"{name}.onnx"] for name in GOOD}
    jobs["mlp"] += ["--opset", "17"]
    jobs["branchy"] = ["export", "branchy", "--format", "onnx", "--out", "branchy.onnx"]
    jobs["eigen"] = ["export", "eigen", "--format", "onnx"]
    jobs["api"] = ["api", "cnn", "api.onnx"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(runs)])}
    proc = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(jobs)], cwd=runs, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def parity_rows(out: str) -> dict[int, str]:
    rows = [line.split(":", 1) for line in out.splitlines() if line.strip().startswith("batch")]
    return {int(head.split()[-1]): rest for head, rest in rows}


@pytest.mark.slow
@pytest.mark.parametrize("name", GOOD)
def test_onnx_export_passes_the_checker_and_matches_pytorch(runs, onnx_cli, name):
    result = onnx_cli[name]
    assert result["code"] == 0, result["err"]
    rows = parity_rows(result["out"])
    assert {1, 7} <= set(rows) and all(r.rstrip().split()[-1] == "ok" or "ok  " in r
                                       for r in rows.values()), result["out"]  # fmt: skip
    path = runs / f"{name}.onnx"
    onnx.checker.check_model(str(path), full_check=True)
    proto = onnx.load(str(path))
    assert [i.name for i in proto.graph.input] == INPUT_NAMES[name]
    assert all(i.type.tensor_type.shape.dim[0].dim_param for i in proto.graph.input)  # batch axis
    assert json.loads(proto.metadata_props[0].value)["inputs"][0]["name"] == INPUT_NAMES[name][0]


@pytest.mark.slow
@pytest.mark.parametrize("name", GOOD)
def test_onnx_runtime_agrees_at_a_batch_size_the_export_never_saw(runs, onnx_cli, name):
    import onnxruntime as ort

    loaded = load_model(runs / name)
    from trainwell.export.batches import model_inputs, sample_batch

    inputs = model_inputs(loaded.parts, sample_batch(loaded.parts, 3), loaded.model)
    session = ort.InferenceSession(str(runs / f"{name}.onnx"), providers=["CPUExecutionProvider"])
    got = session.run(None, {k: v.numpy() for k, v in inputs.items()})[0]
    with torch.inference_mode():
        want = loaded.model(*inputs.values())
    assert got.shape[0] == 3
    np.testing.assert_allclose(got, want.numpy(), atol=1e-4, rtol=1e-3)


@pytest.mark.slow
def test_onnx_opset_is_the_one_asked_for(runs, onnx_cli):
    assert onnx_cli["mlp"]["code"] == 0, onnx_cli["mlp"]["err"]
    proto = onnx.load(str(runs / "mlp.onnx"))
    assert [o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")] == [17]
    assert "opset 17" in onnx_cli["mlp"]["out"]


@pytest.mark.slow
def test_python_api_to_onnx_checks_batch_1_and_odd_sizes(runs, onnx_cli):
    assert onnx_cli["api"]["code"] == [1, 4, 7, 32]
    assert (runs / "api.onnx").is_file()


@pytest.mark.slow
def test_onnx_that_disagrees_with_the_model_exits_1_and_writes_nothing(runs, onnx_cli):
    # torch.export refuses the data-dependent branch; the fallback exporter traces one.
    result = onnx_cli["branchy"]
    assert result["code"] == 1
    assert "FAILED" in result["out"] and "nothing was written" in result["err"]
    assert not (runs / "branchy.onnx").exists()
    assert not [p for p in runs.iterdir() if p.name.startswith(".")]


@pytest.mark.slow
def test_an_unsupported_operator_is_one_line_naming_it(runs, onnx_cli):
    result = onnx_cli["eigen"]
    assert result["code"] == 2 and result["out"] == ""
    assert "operator aten::_linalg_eigh is not supported" in result["err"]
    assert len(result["err"].strip().splitlines()) == 1
    assert not list((runs / "eigen" / "checkpoints").glob("*.onnx"))


@pytest.mark.slow
@pytest.mark.parametrize("name", GOOD)
def test_torchscript_export_matches_pytorch_and_records_its_example(cli, runs, name):
    out_path = runs / f"{name}.torchscript"
    code, out, err = cli("export", str(runs / name), "--format", "torchscript",
                         "--out", str(out_path))  # fmt: skip
    assert code == 0, err
    rows = parity_rows(out)
    assert {1, 7} <= set(rows) and "FAILED" not in out
    extra = {"trainwell.json": ""}
    module = torch.jit.load(str(out_path), _extra_files=extra)
    meta = json.loads(extra["trainwell.json"])
    assert meta["example_batch"] == 4 and [s["name"] for s in meta["inputs"]] == INPUT_NAMES[name]
    loaded = load_model(runs / name)
    from trainwell.export.batches import model_inputs, sample_batch

    inputs = model_inputs(loaded.parts, sample_batch(loaded.parts, 5), loaded.model)
    with torch.inference_mode():
        torch.testing.assert_close(module(*inputs.values()), loaded.model(*inputs.values()))


@pytest.mark.slow
def test_a_trace_that_freezes_the_batch_size_fails_parity(cli, runs):
    code, out, err = cli("export", str(runs / "frozen"), "--format", "torchscript")
    assert code == 1, err
    rows = parity_rows(out)
    assert "FAILED" in rows[1] and "FAILED" in rows[7] and "ok" in rows[4]
    assert not list((runs / "frozen" / "checkpoints").glob("*.torchscript"))


@pytest.mark.slow
def test_a_trace_that_keeps_one_branch_of_data_dependent_code_fails_parity(cli, runs):
    code, out, err = cli("export", str(runs / "branchy"), "--format", "torchscript")
    assert code == 1 and "nothing was written" in err
    rows = parity_rows(out)
    assert "FAILED" in rows[1] and "ok" in rows[4]  # batch 1 takes the other branch
    assert "note: tracer: Converting a tensor to a Python boolean" in out


@pytest.mark.slow
def test_torchscript_by_script_when_asked(cli, runs):
    code, out, err = cli("export", str(runs / "mlp"), "--format", "torchscript", "--script",
                         "--out", str(runs / "scripted.torchscript"))  # fmt: skip
    assert code == 0, err
    assert "torch.jit.script" in out and "FAILED" not in out


@pytest.mark.slow
def test_safetensors_export_compares_a_rebuilt_model_too(cli, runs):
    code, out, err = cli("export", str(runs / "cnn"), "--format", "safetensors",
                         "--out", str(runs / "cnn.safetensors"))  # fmt: skip
    assert code == 0, err
    rows = parity_rows(out)
    assert {1, 7} <= set(rows) and all("0.00e+00" in r for r in rows.values())
    assert "read back and identical" in out


@pytest.mark.slow
def test_a_missing_onnx_extra_is_one_line_naming_it(cli, runs, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import fails as if missing
    code, out, err = cli("export", str(runs / "cnn"), "--format", "onnx",
                         "--out", str(runs / "none.onnx"))  # fmt: skip
    assert code == 2 and out == ""
    assert "pip install 'trainwell[onnx]'" in err and len(err.strip().splitlines()) == 1
    assert not (runs / "none.onnx").exists()
