"""What the doctor's findings say, beyond code and line: modules named as the user
wrote them, warnings shown at the user's line, the reason a loss gives no gradient."""

from __future__ import annotations

import json
import textwrap
import warnings

import pytest
import torch

from trainwell.cli import main


def run_doctor(tmp_path, source: str, *args: str) -> tuple[list[dict], str]:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(source))
    out = tmp_path / "findings.json"
    main(["doctor", "--json", str(out), *args, str(script)])
    return json.loads(out.read_text())["findings"], str(script)


SEQUENTIAL_NAN = """
    import torch
    from torch import nn


    class LogFeatures(nn.Module):
        def forward(self, x):
            return torch.log(x)


    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), LogFeatures(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        loss = model(torch.randn(16, 4)).pow(2).mean()
        loss.backward()
        opt.step()
"""


@pytest.mark.slow
def test_a_module_of_a_sequential_is_named_by_its_index_on_the_models_name(tmp_path):
    findings, _ = run_doctor(tmp_path, SEQUENTIAL_NAN)
    (finding,) = [f for f in findings if f["code"] == "nonfinite-loss"]
    assert "model[1] (LogFeatures)" in finding["message"], finding["message"]
    assert finding["evidence"]["module"] == "model[1] (LogFeatures)"


UNUSED_ATTENTION = """
    import torch
    from torch import nn


    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(8, 16)
            self.attn = nn.MultiheadAttention(16, 2, batch_first=True)

        def forward(self, x):
            return torch.relu(self.proj(x))


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = Encoder()
            self.head = nn.Linear(16, 2)

        def forward(self, x):
            return self.head(self.encoder(x).mean(1))


    torch.manual_seed(0)
    net = Net()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    for _ in range(30):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(net(torch.randn(4, 5, 8)), torch.randint(0, 2, (4,)))
        loss.backward()
        opt.step()
"""


@pytest.mark.slow
def test_a_nested_library_module_is_named_by_its_attribute_path(tmp_path):
    findings, _ = run_doctor(tmp_path, UNUSED_ATTENTION)
    (finding,) = [f for f in findings if f["code"] == "param-without-grad"]
    assert finding["message"].startswith("encoder.attn (MultiheadAttention) ("), finding["message"]


MISSING_FROM_OPTIMIZER = """
    import torch
    from torch import nn

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    net.append(nn.Linear(8, 2))
    for _ in range(5):
        opt.zero_grad()
        nn.functional.cross_entropy(net(torch.randn(8, 4)), torch.randint(0, 2, (8,))).backward()
        opt.step()
"""


@pytest.mark.slow
def test_parameters_left_out_are_named_on_the_models_variable(tmp_path):
    findings, _ = run_doctor(tmp_path, MISSING_FROM_OPTIMIZER)
    (finding,) = [f for f in findings if f["code"] == "param-not-in-optimizer"]
    assert finding["evidence"]["parameters"] == ["net[2].weight", "net[2].bias"]


def test_module_paths_read_as_python():
    from trainwell.doctor.source import module_label, module_path, param_path

    assert module_path("1") == "model[1]"
    assert module_path("encoder.layers.0.attn") == "encoder.layers[0].attn"
    assert module_path("0.1", "self.model") == "self.model[0][1]"
    assert param_path("blocks.2.weight", "m") == "blocks[2].weight"
    assert module_label("", torch.nn.Linear(1, 1), "net") == "net (Linear)"


BROADCAST_WARNING = """
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 3), torch.randn(32)
    for _ in range(3):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)  # the warning's line
        loss.backward()
        opt.step()
    scheduler = torch.optim.lr_scheduler.StepLR(opt, 10)
    scheduler.step(1)  # the scheduler's warning's line
"""


@pytest.mark.slow
def test_a_warning_torch_raises_in_a_wrapped_call_points_at_the_users_line(tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, script = run_doctor(tmp_path, BROADCAST_WARNING)
    lines = textwrap.dedent(BROADCAST_WARNING).splitlines()
    line = next(i for i, t in enumerate(lines, start=1) if "warning's line" in t)
    shown = [(w.filename, w.lineno) for w in caught if "target size" in str(w.message)]
    assert shown and set(shown) == {(script, line)}, shown
    line = next(i for i, t in enumerate(lines, start=1) if "scheduler's warning" in t)
    shown = [(w.filename, w.lineno) for w in caught if "epoch parameter" in str(w.message)]
    assert shown == [(script, line)], shown
    assert warnings.showwarning.__module__ == "warnings"  # the relay is gone


@pytest.mark.slow
def test_cross_entropy_on_one_output_says_the_loss_gives_no_gradient(tmp_path):
    findings, script = run_doctor(tmp_path, """
        import torch
        import torch.nn.functional as F

        torch.manual_seed(0)
        model = torch.nn.Linear(20, 1)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        for _ in range(6):
            opt.zero_grad()
            loss = F.cross_entropy(model(torch.rand(32, 20)), torch.rand(32, 1))
            loss.backward()
            opt.step()
    """)
    assert [(f["code"], f["line"]) for f in findings] == [("loss-no-gradient", 10)]
    assert "single output" in findings[0]["message"], findings[0]["message"]


@pytest.mark.parametrize("node", ["AsStrided", "AsStridedBackward0"])
def test_the_inplace_message_is_read_in_either_torch_spelling(node):
    # torch 2.13 names the op that made the stale tensor, 2.11 its backward node.
    from trainwell.doctor.carried import parse_modified

    text = (
        "one of the variables needed for gradient computation has been modified by an "
        f"inplace operation: [torch.FloatTensor [16, 1]], which is output 0 of {node}, is at "
        "version 2; expected version 1 instead."
    )
    modified = parse_modified(text, None)
    assert (modified.shape, modified.producer) == ((16, 1), "AsStrided")


CORPUS = __import__("pathlib").Path(__file__).resolve().parents[2] / "doctor_corpus"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("script", "statement"),
    [
        # an LSTM's (h, c): .detach() does not exist on a tuple
        ("crash_rnnlm_lstm_states_not_detached", "states = tuple(s.detach() for s in states)"),
        ("crash_word_lm_branch_no_repackage", "hidden = tuple(s.detach() for s in hidden)"),
        # a GRU's single tensor
        ("crash_char_rnn_gru_hidden_not_detached", "hidden = hidden.detach()"),
        # a list of per-layer (h, c) tuples
        ("crash_stacked_lstm_per_layer_states",
         "states = [tuple(s.detach() for s in layer) for layer in states]"),
    ],
)
def test_the_detach_fix_of_a_carried_state_runs_on_its_structure(tmp_path, script, statement):
    out = tmp_path / "f.json"
    main(["doctor", "--json", str(out), str(CORPUS / f"{script}.py")])
    (finding,) = [f for f in json.loads(out.read_text())["findings"]
                  if f["code"] == "graph-retained"]  # fmt: skip
    assert finding["fix"].endswith(statement) or statement + " " in finding["fix"], finding["fix"]
    if "tuple" in statement:
        assert ".detach() (truncated" not in finding["fix"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("script", "names", "fix"),
    [
        # yunjey's GAN whose reset_grad() zeroes d_optimizer only
        ("nozero_gan_reset_grad_one_optimizer", ("g_optimizer's gradients", "G's parameters",
                                                 "only d_optimizer.zero_grad() runs"),
         "call g_optimizer.zero_grad() there as well"),
        # a second optimizer (center loss) never zeroed
        ("nozero_center_loss_second_optimizer", ("optimizer_centloss's gradients",
                                                 "criterion_cent's parameters"),
         "call optimizer_centloss.zero_grad()"),
        # netD.zero_grad() where netG's was meant
        ("nozero_dcgan_wrong_model_zero_grad", ("optimizerG's gradients", "netG's parameters",
                                                "clears another model's"),
         "optimizerG.zero_grad() (or netG.zero_grad())"),
    ],
)
def test_missing_zero_grad_names_the_optimizer_and_the_model_that_pile_up(
    tmp_path, script, names, fix
):
    out = tmp_path / "f.json"
    main(["doctor", "--json", str(out), str(CORPUS / f"{script}.py")])
    (finding,) = [f for f in json.loads(out.read_text())["findings"]
                  if f["code"] == "missing-zero-grad"]  # fmt: skip
    assert "gradients are never cleared:" not in finding["message"]  # it names whose
    for name in names:
        assert name in finding["message"], finding["message"]
    assert fix in finding["fix"], finding["fix"]


@pytest.mark.slow
def test_missing_zero_grad_without_any_zero_grad_names_the_optimizer(tmp_path):
    findings, script = run_doctor(tmp_path, """
        import torch
        from torch import nn

        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
        sgd = torch.optim.SGD(net.parameters(), lr=0.01)
        for _ in range(10):
            loss = nn.functional.cross_entropy(net(torch.randn(16, 8)), torch.randint(0, 2, (16,)))
            loss.backward()
            sgd.step()
    """)
    (finding,) = [f for f in findings if f["code"] == "missing-zero-grad"]
    assert finding["line"] == 11 and finding["related"] == []
    assert finding["message"].startswith("sgd's gradients (net's parameters) are never cleared")
    assert "call sgd.zero_grad() once per step" in finding["fix"]


@pytest.mark.slow
def test_a_nan_that_crashes_before_the_loss_is_traced_to_its_operation(tmp_path):
    out = tmp_path / "f.json"
    assert main(["doctor", "--json", str(out), str(CORPUS / "crash_nan_vae_sqrt_log_var.py")]) == 1
    (finding,) = json.loads(out.read_text())["findings"]
    assert finding["code"] == "nonfinite-loss"
    assert "crash at step 1 (all elements of input should be between 0 and 1)" in finding["message"]
    assert "`sqrt` in model (VAE)" in finding["message"]
    assert "exp(0.5 * log_var)" in finding["fix"]


@pytest.mark.slow
def test_a_nan_crash_with_finite_values_only_is_not_blamed_on_nan(tmp_path):
    # probabilities above 1 (no NaN anywhere): the range check is a plain bug, not a NaN
    findings, _ = run_doctor(tmp_path, """
        import torch
        import torch.nn.functional as F

        model = torch.nn.Linear(4, 1)
        p = model(torch.randn(8, 4)).abs() + 1.5
        F.binary_cross_entropy(p.squeeze(1), torch.ones(8))
    """)
    assert not [f for f in findings if f["code"].startswith("nonfinite")]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("script", "said"),
    [
        ("nan_input_pixel_std_getitem", "every batch so far (16 of 16 watched) holds NaN/Inf"),
        ("nan_input_pixel_std_precomputed", "every batch so far (12 of 12 watched)"),
        # only the batches with a blank scan: the batch is named, not "every batch"
        ("nan_input_per_image_std_some_batches", "batch 6 of this pass over the DataLoader"),
    ],
)
def test_nonfinite_input_says_whether_every_batch_holds_nan(tmp_path, script, said):
    out = tmp_path / "f.json"
    main(["doctor", "--json", str(out), str(CORPUS / f"{script}.py")])
    (finding,) = json.loads(out.read_text())["findings"]
    assert finding["code"] == "nonfinite-input" and said in finding["message"], finding["message"]
    assert "made here, in the data pipeline" in finding["message"]
