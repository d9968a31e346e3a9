"""The model zoo's quick variants: import through torch.export, ``ext.build``, compare with PyTorch.

Why: each zoo model brings ops and fusion patterns the hand-written models lack; a regression
in any pass shows up here as a failed build or a wrong output of a real architecture.
"""
from __future__ import annotations

import numpy as np
import pytest

import ext
from ext.testing import run_relax

import torch
import transformers  # noqa: F401

from ext.frontend import from_torch  # noqa: E402
from ext.models.zoo import ZOO, names, randomize_batchnorm, zoo_model  # noqa: E402

# max abs error relative to PyTorch's largest output magnitude (scripts/zoo.py's tolerance):
# float32 with other summation orders over a few layers stays ~1e-6; a wrong kernel is >> 1e-4
REL_TOL = 1e-4


def relative_error(got: np.ndarray, ref: np.ndarray) -> float:
    assert got.shape == ref.shape, f"shape {got.shape} != {ref.shape}"
    return float(np.abs(got.astype("float64") - ref).max() / np.abs(ref).max())


@pytest.mark.parametrize("name", names())
def test_quick_model_matches_pytorch(cpu_target, name):
    model, inputs = zoo_model(name, quick=True)
    with torch.no_grad():
        ref = model(*inputs).numpy().astype("float64")
    assert np.isfinite(ref).all() and np.abs(ref).max() > 0, f"{name}: degenerate PyTorch output"
    got = run_relax(ext.build(from_torch(model, inputs), cpu_target), *[t.numpy() for t in inputs])
    err = relative_error(got, ref)
    assert err <= REL_TOL, f"{name}: max abs error {err:.2e} of the largest output > {REL_TOL}"


def test_zoo_covers_vision_text_and_audio():
    assert len(ZOO) >= 25
    assert {e.kind for e in ZOO.values()} == {"vision", "text", "audio"}
    assert names("audio") and all(ZOO[n].kind == "audio" for n in names("audio"))


def test_unknown_model_is_named():
    with pytest.raises(ValueError, match="no_such_net.*resnet18"):
        zoo_model("no_such_net")


def test_weights_and_inputs_follow_the_seed():
    a_model, a_in = zoo_model("bert_base", quick=True, seed=3)
    b_model, b_in = zoo_model("bert_base", quick=True, seed=3)
    c_model, c_in = zoo_model("bert_base", quick=True, seed=4)
    with torch.no_grad():
        a, b, c = (m(*x) for m, x in ((a_model, a_in), (b_model, b_in), (c_model, c_in)))
    assert torch.equal(a, b)
    assert not torch.allclose(a, c)


def test_batchnorm_statistics_are_randomized():
    model, _ = zoo_model("resnet18", quick=True)
    bns = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert len(bns) >= 5
    mean = torch.cat([m.running_mean for m in bns])
    var = torch.cat([m.running_var for m in bns])
    assert 0.03 < float(mean.std()) < 0.3
    assert float(var.min()) >= 0.5 and float(var.max()) <= 1.5 and float(var.std()) > 0.1
    assert not torch.allclose(torch.cat([m.weight for m in bns]), torch.ones(1))


def test_randomize_batchnorm_counts_and_skips_other_layers():
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 5, 3), torch.nn.BatchNorm2d(5), torch.nn.LayerNorm(7),
                              torch.nn.BatchNorm1d(7))
    conv_w = net[0].weight.clone()
    assert randomize_batchnorm(net, torch.Generator().manual_seed(0)) == 2
    assert torch.equal(net[0].weight, conv_w) and torch.equal(net[2].weight, torch.ones(7))
    assert not torch.equal(net[3].running_var, torch.ones(7))


def test_mobilevitv2_patch_reshapes_equal_unfold_and_fold():
    from types import SimpleNamespace

    from ext.models.zoo_vision import _patches_by_reshape

    layer = SimpleNamespace(patch_height=2, patch_width=3)
    x = torch.randn(2, 5, 6, 9)
    _patches_by_reshape(layer)
    patches, size = layer.unfolding(x)
    expect = torch.nn.functional.unfold(x, kernel_size=(2, 3), stride=(2, 3)).reshape(2, 5, 6, -1)
    assert size == (6, 9) and torch.equal(patches, expect)
    assert torch.equal(layer.folding(patches, size), x)


def test_zoo_script_profiles_ext_and_onnxruntime():
    """``scripts/zoo.py --profile N``: per-kernel rows of ext and per-op rows of onnxruntime."""
    import os
    import subprocess
    import sys

    root = os.path.join(os.path.dirname(__file__), "..")
    out = subprocess.run([sys.executable, os.path.join(root, "scripts", "zoo.py"), "--models", "squeezenet1_1",
                          "--quick", "--rounds", "0", "--profile", "4"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout
    assert "### squeezenet1_1: ext" in text and "| kernel | candidate | calls | ms | share |" in text
    assert "conv2d." in text  # the conv kernels are attributed to their candidates
    assert "onnxruntime" in text and "Conv x" in text


@pytest.mark.parametrize("name,batch,size,shape", [
    ("efficientnet_b0", 2, 45, (2, 3, 45, 45)),   # another image side (odd) and batch
    ("gpt2", 3, 9, (3, 9)),                        # another sequence length (decoder, ones mask)
    ("wav2vec2_base", 1, 1500, (1, 1500)),        # another audio length
])
def test_other_input_sizes_match_pytorch(cpu_target, name, batch, size, shape):
    """``zoo_model(batch=, size=)`` (``scripts/zoo.py --batch/--size``): the model at inputs it was not
    written for builds and matches PyTorch; token ids stay inside the vocabulary."""
    model, inputs = zoo_model(name, quick=True, batch=batch, size=size)
    assert tuple(inputs[0].shape) == shape
    if not inputs[0].dtype.is_floating_point:
        assert 0 <= int(inputs[0].min()) and int(inputs[0].max()) < model.model.config.vocab_size
    with torch.no_grad():
        ref = model(*inputs).numpy().astype("float64")
    got = run_relax(ext.build(from_torch(model, inputs), cpu_target), *[t.numpy() for t in inputs])
    assert relative_error(got, ref) <= REL_TOL


def test_other_input_sizes_are_checked():
    with pytest.raises(ValueError, match="batch and size must be >= 1"):
        zoo_model("resnet18", quick=True, batch=0)


def test_extra_architectures_are_full_size_only_and_apart():
    extra = names(extra=True)
    assert len(extra) >= 30 and not set(extra) & set(names())
    with pytest.raises(ValueError, match="no quick variant"):
        zoo_model(extra[0], quick=True)


@pytest.mark.parametrize("builder", ["resnext50_32x4d", "squeezenet10"])
def test_plain_extra_cnns_match_pytorch(cpu_target, builder):
    """The extra set's plain-PyTorch CNNs (grouped 3x3 of 4 to 32 channels; SqueezeNet 1.0's
    7x7 stem and ceil-mode pools) at 64x64."""
    from ext.models import cnn

    torch.manual_seed(0)
    model = getattr(cnn, builder)(num_classes=10)
    randomize_batchnorm(model, torch.Generator().manual_seed(1))
    model.eval()
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        ref = model(x).numpy().astype("float64")
    got = run_relax(ext.build(from_torch(model, (x,)), cpu_target), x.numpy())
    assert relative_error(got, ref) <= REL_TOL
