"""The config trust model: configs are code by default; ``--safe`` for configs from elsewhere.

Each refused route is one that ran a command, unpickled or wrote a file from a config in
the sweep of issue 25; under ``--safe`` each is one line, exit 2, and nothing written.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from trainwell import trust
from trainwell.cli import main

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def _fresh_policy(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    was = trust.active()
    trust.reset(None)
    yield
    trust.reset(was)


def _write_config(tmp_path: Path, data: dict) -> str:
    path = tmp_path / "their.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _refused(capsys, argv: list[str], *needles: str) -> str:
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1, err
    for needle in needles:
        assert needle in err, err
    return err


def _nothing_written(tmp_path: Path, keep: tuple[str, ...] = ()) -> None:
    names = sorted(p.name for p in tmp_path.iterdir() if p.name not in keep)
    assert names == [], names


# Routes by command line override: (overrides, what the line names).
OVERRIDE_ROUTES = [
    (["model.name=yaml:unsafe_load"], "yaml"),
    (["data.name=numpy:load", "data.kwargs.file=x.npy"], "numpy"),
    (["model.name=torch:load", "model.kwargs.f=x.pt"], "torch"),
    (["model.name=torch.hub:load", "model.kwargs.repo_or_dir=a/b"], "torch.hub"),
    (["data.name=pandas:read_pickle"], "pandas"),
    (["data.name=joblib:load"], "joblib"),
    (["model.name=mlflow.utils.process:_exec_cmd"], "mlflow"),
    (["data.name=pip._internal.utils.subprocess:call_subprocess"], "pip"),
    (["optim.name=numpy:save"], "numpy"),
    (["sched.name=omegaconf:OmegaConf.save"], "omegaconf"),
    (["train.loss=torch:load"], "torch"),
    (["train.step=numpy:load"], "numpy"),
    (["data.collate=joblib:load"], "joblib"),
    # An allowed module's attribute that leads out of it.
    (["model.name=torch.nn:modules.module.torch.load"], "torch"),
    (["model.name=torch.nn:modules.module.torch.hub.load"], "torch"),
    (["train.loss=torchmetrics:utilities.data.torch.load"], "torch"),
]


@pytest.mark.slow
@pytest.mark.parametrize("overrides,module", OVERRIDE_ROUTES)
def test_safe_refuses_routes_out_of_the_allow_list(capsys, tmp_path, overrides, module):
    err = _refused(capsys, ["train", "--safe", *overrides], "--safe", "run.allow_imports")
    assert f"reaches {module}" in err
    _nothing_written(tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize(
    "spec",
    [
        {"name": "numpy:save", "kwargs": {"file": "pwned.npy", "arr": [1, 2]}},
        "omegaconf:OmegaConf.save",
        {"name": "mlflow.utils.process:_exec_cmd", "kwargs": {"cmd": ["touch", "pwned"]}},
    ],
)
def test_safe_refuses_callbacks_and_loggers_from_a_file(capsys, tmp_path, spec):
    for key in ("callbacks", "log"):
        data = {"callbacks": [spec]} if key == "callbacks" else {"log": {"loggers": [spec]}}
        config = _write_config(tmp_path, data)
        _refused(capsys, ["train", "--safe", "--config", config], "outside what --safe allows")
        _nothing_written(tmp_path, keep=("their.yaml",))


@pytest.mark.slow
def test_safe_refuses_a_metric_object_outside(capsys, tmp_path):
    config = _write_config(
        tmp_path, {"train": {"metrics": {"x": {"name": "joblib:load", "kwargs": {}}}}}
    )
    _refused(capsys, ["train", "--safe", "--config", config], "train.metrics.x", "joblib")


@pytest.mark.slow
@pytest.mark.parametrize(
    "kwarg,value",
    [
        ("weights_only", False),
        ("weights_only", "false"),
        ("allow_pickle", True),
        ("trust_repo", True),
        ("trust_repo", "check"),
        ("trust_remote_code", True),
        ("unsafe", True),
        ("pickle_module", "pickle"),
    ],
)
def test_safe_refuses_kwargs_that_load_or_run(capsys, tmp_path, kwarg, value):
    # A function of the user's own (allowed) that forwards its kwargs to a loader.
    (tmp_path / "loaders_kw.py").write_text("def make(**kw):\n    return kw\n")
    config = _write_config(
        tmp_path, {"data": {"name": "loaders_kw:make", "kwargs": {kwarg: value}}}
    )
    _refused(capsys, ["train", "--safe", "--config", config], f"data.kwargs.{kwarg}", "--safe")
    _nothing_written(tmp_path, keep=("their.yaml", "loaders_kw.py", "__pycache__"))


@pytest.mark.slow
def test_safe_refuses_a_users_module_that_hands_on_a_third_party_loader(capsys, tmp_path):
    # Re-exports are judged by where the object comes from, not the module named.
    (tmp_path / "reexport_a.py").write_text("import numpy as np\nfrom numpy import load\n")
    _refused(capsys, ["train", "--safe", "model.name=reexport_a:load"], "reaches numpy")
    _refused(capsys, ["train", "--safe", "model.name=reexport_a:np.load"], "reaches numpy")
    _refused(capsys, ["train", "--safe", "model.name=reexport_a:np"], "reaches numpy")


@pytest.mark.slow
def test_a_config_file_cannot_widen_safe_mode_itself(capsys, tmp_path):
    config = _write_config(
        tmp_path, {"run": {"allow_imports": ["numpy"]}, "model": {"name": "numpy:load"}}
    )
    _refused(capsys, ["train", "--safe", "--config", config], "cannot widen --safe")
    # Setting run.safe: false in the file does not undo --safe either.
    config = _write_config(tmp_path, {"run": {"safe": False}, "model": {"name": "numpy:load"}})
    _refused(capsys, ["train", "--safe", "--config", config], "reaches numpy")


@pytest.mark.slow
def test_allow_imports_on_the_command_line_widens_it(capsys, tmp_path):
    (tmp_path / "fromnp.py").write_text("import numpy as np\n")
    argv = ["train", "--safe", "--dry-run", "model.name=fromnp:np.load"]
    _refused(capsys, argv, "reaches numpy")
    trust.reset(None)
    # numpy allowed: the path now resolves, and fails for what it is (not a model).
    err = _refused(capsys, [*argv, "run.allow_imports=[numpy]"])
    assert "--safe" not in err


@pytest.mark.slow
def test_the_standard_library_refusal_says_configs_are_code(capsys, tmp_path):
    for path in ("os:system", "subprocess:run", "torch:os.system", "pickle:loads"):
        _refused(capsys, ["train", f"model.name={path}"], "configs are code", "--safe")
    _nothing_written(tmp_path)


@pytest.mark.slow
def test_without_safe_a_config_is_trusted_like_a_script(tmp_path, capsys):
    # The default: a third-party callable a config names does run (here it writes a file).
    config = _write_config(
        tmp_path, {"callbacks": [{"name": "numpy:save", "kwargs": {"file": "made.npy",
                                                                   "arr": [1]}}]}
    )  # fmt: skip
    main(["train", "--config", config, "--dry-run"])
    capsys.readouterr()
    assert (tmp_path / "made.npy").exists()


# What --safe still lets through: a config that builds a run from the allow-list and the
# user's own files.
@pytest.mark.slow
def test_safe_runs_the_default_digits_training(tmp_path, capsys):
    code = main(["train", "--safe", "train.max_steps=3", "run.dir=r"])
    assert code == 0, capsys.readouterr().err
    assert "safe: true" in (tmp_path / "r" / "config.yaml").read_text()


@pytest.mark.slow
def test_safe_allows_torch_optimizers_schedulers_losses_and_torchmetrics(tmp_path, capsys):
    config = _write_config(
        tmp_path,
        {
            "optim": {"name": "torch.optim:AdamW"},
            "sched": {"name": "torch.optim.lr_scheduler:StepLR", "kwargs": {"step_size": 5}},
            "train": {
                "loss": "torch.nn:CrossEntropyLoss",
                "metrics": {"acc": {"name": "torchmetrics.classification:MulticlassAccuracy",
                                    "kwargs": {"num_classes": 10}}},
            },
        },
    )  # fmt: skip
    code = main(["train", "--safe", "--dry-run", "--config", config])
    assert code == 0, capsys.readouterr().err


@pytest.mark.slow
def test_safe_allows_the_users_own_module_in_the_working_directory(tmp_path, capsys):
    (tmp_path / "my_nets.py").write_text(
        textwrap.dedent(
            """
            import torch.nn as nn

            def build(num_classes):
                return nn.Sequential(nn.Flatten(), nn.Linear(64, num_classes))
            """
        )
    )
    (tmp_path / "pkg_cb").mkdir()
    (tmp_path / "pkg_cb" / "__init__.py").write_text("")
    (tmp_path / "pkg_cb" / "cbs.py").write_text(
        "class Quiet:\n    def on_fit_end(self, *a, **k):\n        pass\n"
    )
    code = main(["train", "--safe", "--dry-run", "model.name=my_nets:build",
                 "callbacks=[pkg_cb.cbs:Quiet]"])  # fmt: skip
    assert code == 0, capsys.readouterr().err


def test_policy_by_name_and_by_place(tmp_path):
    policy = trust.Policy()
    assert policy.allows("torch.nn.modules.linear")
    assert policy.allows("torch.optim.lr_scheduler")
    assert policy.allows("torchmetrics.classification.accuracy")
    assert not policy.allows("torch")
    assert not policy.allows("torch.hub")
    assert not policy.allows("torch.serialization")
    assert not policy.allows("trainwell.cli")  # runs any verb
    assert not policy.allows("trainwell.doctor.runner")  # runs a script
    assert not policy.allows("numpy")
    (tmp_path / "mine_here.py").write_text("")
    assert policy.allows("mine_here")
    assert not policy.allows("no_such_module_anywhere")
    assert trust.Policy(extra=("numpy",)).allows("numpy.lib.npyio")
    assert not trust.Policy(extra=("numpy",)).allows("numpyx")


def _cli(*argv: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trainwell", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        timeout=300,
    )


@pytest.mark.slow
def test_safe_as_a_real_command_refuses_before_writing(tmp_path, capsys):
    # train as a real process; the other verbs through the same main, in this one.
    out = tmp_path / "pwned.npy"
    config = _write_config(
        tmp_path, {"callbacks": [{"name": "numpy:save", "kwargs": {"file": str(out),
                                                                   "arr": [1]}}]}
    )  # fmt: skip
    for verb in (["train"], ["lr-find", "--steps", "3"], ["bench-data"], ["profile"]):
        argv = [*verb, "--safe", "--config", config]
        if verb == ["train"]:
            done = _cli(*argv, cwd=tmp_path)
            code, err = done.returncode, done.stderr
        else:
            trust.reset(None)
            code, err = main(argv), capsys.readouterr().err
        assert code == 2, (verb, err)
        assert err.count("\n") == 1, err
        assert "outside what --safe allows" in err
        assert not out.exists()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["their.yaml"]


@pytest.mark.slow
def test_every_verb_that_reads_a_config_takes_safe():
    from trainwell.cli import _parser

    sub = next(a for a in _parser()._actions if a.dest == "command")
    for name, parser in sub.choices.items():
        has_safe = any("--safe" in a.option_strings for a in parser._actions)
        reads = any("--config" in a.option_strings for a in parser._actions)
        if reads or name in ("export", "predict"):
            assert has_safe, name
    assert {"train", "lr-find", "bench-data", "profile", "export", "predict"} <= {
        n for n, p in sub.choices.items() if any("--safe" in a.option_strings for a in p._actions)
    }


@pytest.mark.slow
def test_predict_safe_refuses_a_checkpoint_naming_code_outside(tmp_path, monkeypatch, capsys):
    # A run whose model comes from a module that is not under the working directory of
    # the later predict (a checkpoint from elsewhere): --safe refuses to import it.
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "far_nets.py").write_text(
        "import torch.nn as nn\n\ndef build(num_classes):\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(64, num_classes))\n"
    )
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.syspath_prepend(str(lib))
    try:
        code = main(["train", "model.name=far_nets:build", "train.max_steps=2", "run.dir=r"])
        assert code == 0, capsys.readouterr().err
        capsys.readouterr()
        trust.reset(None)
        assert main(["predict", "--safe", "r", "--split", "val"]) == 2
        err = capsys.readouterr().err
        assert "far_nets" in err and "--safe" in err, err
        trust.reset(None)
        code = main(["export", "--safe", "r", "--format", "torchscript", "--out", "m.pt"])
        err = capsys.readouterr().err
        assert code == 2 and "far_nets" in err, err
        assert not (work / "m.pt").exists()
        trust.reset(None)
        assert main(["predict", "r", "--split", "val"]) == 0, capsys.readouterr().err
    finally:
        sys.modules.pop("far_nets", None)


@pytest.mark.slow
def test_safe_under_a_launcher_refuses_before_any_worker_starts(tmp_path):
    done = _cli("train", "--safe", "--nproc", "2", "model.name=joblib:load", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "reaches joblib" in done.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "path,allowed",
    [
        ("torch.nn.functional:conv2d", True),  # a C operator re-exported by an allowed module
        ("torch.nn.functional:cross_entropy", True),
        ("torch:nn.Linear", True),  # torch is imported already: judged by what it reaches
        ("torch:optim.SGD", True),
        ("torch.nn.utils.rnn:pad_sequence", True),
        ("torch:from_file", False),  # maps (and with shared=True writes) a file
        ("torch:save", False),
        ("torch:jit.load", False),
        ("torch.nn.functional:torch.load", False),
        ("torch:_C._jit_pass_lint", False),
        ("numpy:load", False),
        ("trainwell.cli:main", False),
        ("trainwell.doctor.runner:run_script", False),
    ],
)
def test_safe_resolve_judges_what_the_path_reaches(path, allowed):
    from trainwell.errors import UserError
    from trainwell.imports import resolve

    trust.activate()
    if allowed:
        assert callable(resolve(path, "model.name"))
    else:
        with pytest.raises(UserError, match="outside what --safe allows"):
            resolve(path, "model.name")
