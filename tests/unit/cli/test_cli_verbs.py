"""One way to add a verb (issue 27 §2): every verb is a module of ``trainwell/commands/``
with ``register(sub)``, listed in ``trainwell.cli.COMMANDS``; the flags several verbs share
come from ``trainwell/commands/common.py`` and mean the same everywhere.

The modules and verbs are found by looking (``pkgutil`` over the package, the parser's own
sub-parsers), never from a list kept here, so a verb added later is checked too.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import subprocess
import sys

import pytest

import trainwell.commands
from tests.conftest import REPO
from trainwell import cli
from trainwell.commands import common
from trainwell.errors import Diverged, UserError


def _command_modules() -> dict[str, object]:
    """Every module of trainwell/commands/ that has a register(): name -> module."""
    found = {}
    for info in pkgutil.iter_modules(trainwell.commands.__path__):
        module = importlib.import_module(f"trainwell.commands.{info.name}")
        if callable(getattr(module, "register", None)):
            found[info.name] = module
    return found


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def _verbs() -> dict[str, argparse.ArgumentParser]:
    return _subparsers(cli._parser())


def _verbs_of(module: object) -> list[str]:
    """The verbs ``module.register`` adds on a parser of its own, in the order it adds them."""
    parser = argparse.ArgumentParser(prog="trainwell")
    module.register(parser.add_subparsers(dest="command"))  # type: ignore[attr-defined]
    return list(_subparsers(parser))


def _flags(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {s: a for a in parser._actions for s in a.option_strings}


def _config_verbs() -> list[str]:
    return sorted(v for v, p in _verbs().items() if "--config" in _flags(p))


def test_every_module_with_register_is_listed_and_nothing_else():
    modules = _command_modules()
    assert set(modules) == set(cli.COMMANDS), "add the module to trainwell.cli.COMMANDS"
    assert len(cli.COMMANDS) == len(set(cli.COMMANDS))  # each registered once
    # The helper module is not a verb: it has no register().
    assert "common" not in modules


def test_the_parser_holds_exactly_the_verbs_the_modules_register():
    by_module = {name: _verbs_of(module) for name, module in _command_modules().items()}
    for name, verbs in by_module.items():
        assert verbs, f"trainwell.commands.{name}.register adds no verb"
    registered = [v for verbs in by_module.values() for v in verbs]
    assert len(registered) == len(set(registered)), "two modules add the same verb"
    # No verb is wired anywhere else (cli.py holds none of its own).
    assert set(registered) == set(_verbs())
    assert {"train", "lr-find", "doctor", "env"} <= set(registered)


def test_the_help_lists_the_verbs_in_the_order_of_commands():
    modules = _command_modules()
    order = [v for name in cli.COMMANDS for v in _verbs_of(modules[name])]
    assert list(_verbs()) == order


@pytest.mark.parametrize("verb", sorted(_verbs()))
def test_every_verb_has_a_handler_in_its_module(verb):
    handler = _verbs()[verb].get_default("handler")
    assert callable(handler), f"{verb}: set_defaults(handler=...) missing"
    assert handler.__module__.startswith("trainwell.commands."), handler.__module__


@pytest.mark.parametrize("verb", sorted(_verbs()))
def test_every_verb_help_works(verb, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main([verb, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: trainwell {verb} "), out[:200]
    assert "-h, --help" in out


def test_verb_help_in_a_fresh_process_for_each_verb():
    # Each --help in a process of its own, as a user types it (one interpreter for all:
    # a loop of subprocesses from inside it; the import checks are tests/e2e/test_startup.py's).
    code = (
        "import subprocess, sys\n"
        "bad = []\n"
        "for verb in sys.argv[1:]:\n"
        "    p = subprocess.run([sys.executable, '-m', 'trainwell', verb, '--help'],\n"
        "                       capture_output=True, text=True)\n"
        "    if p.returncode or not p.stdout.startswith('usage: trainwell ' + verb):\n"
        "        bad.append((verb, p.returncode, p.stderr[-300:]))\n"
        "print(bad)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, *sorted(_verbs())], cwd=REPO,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]", proc.stdout


def test_no_verb_prints_the_help_and_exits_2(capsys):
    assert cli.main([]) == 2
    out = capsys.readouterr().out
    assert out.startswith("usage: trainwell ")
    for verb in _verbs():
        assert verb in out


@pytest.mark.parametrize("verb", _config_verbs())
def test_config_verbs_share_config_overrides_safe_and_debug(verb):
    parser = _verbs()[verb]
    flags = _flags(parser)
    config = flags["--config"]
    assert (config.metavar, config.help, config.default) == ("FILE", "YAML config file", None)
    (overrides,) = [a for a in parser._actions if a.dest == "overrides"]
    assert (overrides.nargs, overrides.metavar) == ("*", "KEY=VALUE")
    assert "--safe" in flags  # trust.add_safe_flags: every verb that reads a config
    assert flags["--debug"].default is argparse.SUPPRESS


def test_the_config_verbs_are_the_ones_expected():
    # A floor, not the list: a new verb that reads a config joins the parametrized checks.
    assert {"train", "lr-find", "data", "bench-data", "batch-size", "profile"} <= set(
        _config_verbs()
    )


@pytest.mark.parametrize("verb", _config_verbs())
@pytest.mark.parametrize(
    "extra, wanted",
    [
        (["nosuch.key=1"], "nosuch"),
        (["data.batch_size=many"], "data.batch_size"),
        (["--config", "no/such/config.yaml"], "no/such/config.yaml"),
    ],
    ids=["unknown-key", "wrong-type", "missing-file"],
)
def test_a_config_error_is_one_line_and_exit_2(verb, extra, wanted, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main([verb, *extra]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("trainwell: error: ") and wanted in lines[0], lines[0]
    assert "Traceback" not in captured.err + captured.out
    assert list(tmp_path.iterdir()) == []  # refused before anything was written


def test_a_config_file_with_a_bad_key_is_refused_by_each_config_verb(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text("optim:\n  lrr: 0.1\n")
    for verb in _config_verbs():
        assert cli.main([verb, "--config", str(config)]) == 2, verb
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "optim.lrr" in err, (verb, err)


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_shows_the_traceback_of_a_config_error(where):
    argv = ["--debug", "lr-find", "nosuch.key=1"] if where == "before" else [
        "data", "--debug", "nosuch.key=1"]  # fmt: skip
    with pytest.raises(UserError, match="nosuch"):
        cli.main(argv)


def test_overrides_between_flags_reach_the_verb(capsys):
    args = cli._parse(["profile", "a=1", "--steps", "2", "b=2", "--warmup", "0", "c=3"])
    assert args.overrides == ["a=1", "b=2", "c=3"]
    assert (args.steps, args.warmup) == (2, 0)
    with pytest.raises(SystemExit):
        cli._parse(["env", "a=1"])  # env reads no config: an override is refused
    assert "unrecognized arguments: a=1" in capsys.readouterr().err


def test_launcher_flags_become_launch_options():
    args = cli._parse(["train", "--nproc", "3", "--nnodes", "2", "--node-rank", "1",
                       "--master-addr", "10.0.0.2", "--master-port", "29511",
                       "--max-restarts", "2", "--rdzv-id", "job7"])  # fmt: skip
    assert common.wants_launcher(args)
    opts = common.launch_options(args)
    assert (opts.nproc, opts.nnodes, opts.node_rank) == (3, 2, 1)
    assert (opts.master_addr, opts.master_port, opts.max_restarts) == ("10.0.0.2", 29511, 2)
    assert (opts.rdzv_id, opts.rdzv_endpoint, opts.rdzv_backend) == ("job7", None, None)


def test_no_launcher_flag_is_one_process():
    args = cli._parse(["train"])
    assert not common.wants_launcher(args)
    assert common.wants_launcher(cli._parse(["train", "--nnodes", "2"]))
    assert common.launch_options(args).nproc == 1  # --nproc unset: one per node


@pytest.mark.parametrize(
    "flags, wanted",
    [
        (["--nproc", "0"], "--nproc and --nnodes must be >= 1"),
        (
            ["--nproc", "2", "--nnodes", "2", "--node-rank", "2", "--master-port", "1"],
            "--node-rank must be in [0, 2)",
        ),
        (["--nproc", "2", "--max-restarts", "-1"], "--max-restarts must be >= 0"),
    ],  # fmt: skip
)
def test_bad_launcher_flags_are_one_line_and_exit_2(flags, wanted, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["train", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("trainwell: error: ") and wanted in err, err
    assert "\n" not in err
    assert list(tmp_path.iterdir()) == []


def _namespace(debug: bool = False) -> argparse.Namespace:
    return argparse.Namespace(debug=debug)


def _raising(exc: BaseException):
    def handler(args: argparse.Namespace) -> int:
        raise exc

    return handler


def test_run_returns_the_handlers_code():
    assert common.run(lambda args: 0, _namespace()) == 0
    assert common.run(lambda args: 7, _namespace()) == 7


def test_run_makes_bad_input_one_line_and_2(capsys):
    assert common.run(_raising(UserError("data.name: no such data set 'x'")), _namespace()) == 2
    assert capsys.readouterr().err == "trainwell: error: data.name: no such data set 'x'\n"


def test_run_keeps_escape_bytes_off_the_terminal(capsys):
    assert common.run(_raising(UserError("run.dir: bad\x1b[2J name")), _namespace()) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and err.startswith("trainwell: error: run.dir: bad")


def test_run_makes_a_diverged_run_exit_1(capsys):
    assert common.run(_raising(Diverged("loss is NaN at step 3")), _namespace()) == 1
    assert capsys.readouterr().err == "trainwell: failed: loss is NaN at step 3\n"


def test_run_makes_an_interruption_128_plus_the_signal(capsys):
    assert common.run(_raising(KeyboardInterrupt()), _namespace()) == 130
    assert capsys.readouterr().err == "trainwell: interrupted by SIGINT\n"
    stopped = KeyboardInterrupt()
    stopped.signum = 15  # type: ignore[attr-defined]  # as engine's Interrupted carries it
    stopped.reported = True  # type: ignore[attr-defined]  # the run said it already
    assert common.run(_raising(stopped), _namespace()) == 143
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("exc", [UserError("x"), Diverged("y"), KeyboardInterrupt()])
def test_run_with_debug_raises(exc):
    with pytest.raises(type(exc)):
        common.run(_raising(exc), _namespace(debug=True))


def test_run_leaves_a_bug_its_traceback():
    with pytest.raises(ZeroDivisionError):
        common.run(lambda args: 1 // 0, _namespace())
