"""What the dry step refuses in one line (exit code 2, no run folder) where PyTorch would
fail mid-run with a traceback: a model without parameters, samples of different lengths
without data.collate, and class-index targets given to a loss that compares values."""

from __future__ import annotations

import textwrap

import pytest
import torch

USER = textwrap.dedent(
    """
    import torch
    from torch.utils.data import Dataset, TensorDataset

    def no_params(**kw):
        return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.ReLU())

    def identity(**kw):
        return torch.nn.Identity()

    def frozen(**kw):
        net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3))
        for p in net.parameters():
            p.requires_grad_(False)
        return net

    class Lengths(Dataset):
        def __init__(self, shape):
            self.shape = shape
        def __len__(self):
            return 32
        def __getitem__(self, i):
            return torch.randn(*self.shape(i)), torch.tensor(i % 3)

    class DictLengths(Dataset):
        def __len__(self):
            return 32
        def __getitem__(self, i):
            return {"input_ids": torch.arange(2 + i % 4), "labels": torch.tensor(i % 2)}

    def seq():
        return Lengths(lambda i: (3 + i % 5,))

    def images():
        return Lengths(lambda i: (1, 8 + i % 3, 8))

    def tokens():
        return DictLengths()

    def pad(samples):
        xs = torch.nn.utils.rnn.pad_sequence([x for x, _ in samples], batch_first=True)
        xs = torch.nn.functional.pad(xs, (0, 8 - xs.shape[1]))
        return xs, torch.stack([y for _, y in samples])

    def classes(n=48):
        return TensorDataset(torch.randn(n, 4), torch.arange(n) % 3)

    def int8_classes(n=48):
        return TensorDataset(torch.randn(n, 4), (torch.arange(n) % 3).to(torch.int8))
    """
)


@pytest.fixture
def user(tmp_path, request):
    # One module name per test: in-process runs share sys.modules.
    name = "dry_" + request.node.name.replace("[", "_").replace("]", "").replace("-", "_")
    (tmp_path / f"{name}.py").write_text(USER)
    return name


def refused(result, tmp_path, *expected: str) -> None:
    code, out, err = result
    assert code == 2, (code, err[-2000:])
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trainwell: error: "), err[-2000:]
    for text in expected:
        assert text in lines[0], lines[0]
    assert "Traceback" not in err
    assert not (tmp_path / "run").exists()


BASE = ["data.batch_size=8", "train.epochs=1", "run.dir=run"]


@pytest.mark.slow
@pytest.mark.parametrize(("model", "said"), [
    ("no_params", "Sequential has no parameters"),
    ("identity", "Identity has no parameters"),
    ("frozen", "every parameter of Sequential (2) is frozen"),
])  # fmt: skip
def test_a_model_with_nothing_to_train(cli, tmp_path, user, model, said):
    refused(cli("train", f"data.name={user}:classes", f"model.name={user}:{model}", *BASE),
            tmp_path, "model: ", said, "nothing to train")  # fmt: skip


@pytest.mark.slow
def test_a_model_without_parameters_from_python(tmp_path, monkeypatch):
    from torch.utils.data import TensorDataset

    import trainwell
    from trainwell.errors import UserError

    monkeypatch.chdir(tmp_path)
    data = TensorDataset(torch.randn(16, 4), torch.arange(16) % 2)
    with pytest.raises(UserError, match="ReLU has no parameters"):
        trainwell.fit(trainwell.load_config(overrides=["run.dir=run"]), model=torch.nn.ReLU(),
                      train_data=data)  # fmt: skip
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
@pytest.mark.parametrize("data", ["seq", "images", "tokens"])
def test_variable_length_samples_without_a_collate(cli, tmp_path, user, data):
    model = ["model.name=mlp"] if data != "tokens" else ["model.name=mlp"]
    refused(cli("train", f"data.name={user}:{data}", *model, *BASE), tmp_path,
            "data.collate", "differ in shape", "pad")  # fmt: skip


@pytest.mark.slow
def test_variable_length_samples_with_a_collate_train(cli, tmp_path, user):
    code, _, err = cli("train", f"data.name={user}:seq", f"data.collate={user}:pad",
                       "model.name=mlp", "model.kwargs.input_shape=[8]", *BASE)  # fmt: skip
    assert code == 0, err[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("loss", ["mse", "l1", "smooth_l1", "bce_with_logits"])
@pytest.mark.parametrize("data", ["classes", "int8_classes"])
def test_a_value_loss_on_class_targets_is_caught_before_training(cli, tmp_path, user, loss,
                                                                 data):  # fmt: skip
    refused(cli("train", f"data.name={user}:{data}", "model.name=mlp", f"train.loss={loss}",
                *BASE), tmp_path, "train.loss:", "class indices", "cross_entropy")  # fmt: skip


@pytest.mark.slow
def test_mse_on_float_targets_still_trains(cli, tmp_path, user):
    (tmp_path / "reg.py").write_text(
        "import torch\nfrom torch.utils.data import TensorDataset\n"
        "def make(n=48):\n    x = torch.randn(n, 4)\n"
        "    return TensorDataset(x, x.sum(1, keepdim=True))\n"
    )
    code, _, err = cli("train", "data.name=reg:make", "model.name=mlp", "train.loss=mse",
                       "model.kwargs.num_classes=1", *BASE)  # fmt: skip
    assert code == 0, err[-2000:]
