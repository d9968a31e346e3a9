"""``torch.compile(model, backend="ext")``: ext as a TorchDynamo backend (``ext/dynamo.py``).

Every case compares the compiled model with the same model run eagerly, and reads the backend's
``graphs`` to check what ran where: a graph that silently fell back to PyTorch would pass a
comparison while compiling nothing, so each test states how many graphs ext built.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import ext.dynamo
from ext.testing import assert_close

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def strict_backend(**kw):
    return ext.dynamo.make_backend(strict=True, **kw)


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 5)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 1.5)

    def forward(self, x):
        y = F.relu(self.bn(self.conv(x)))
        return self.fc(y.mean((2, 3)))


class Encoder(nn.Module):
    """One attention block over a sequence of any length."""

    def __init__(self, d=16, heads=2):
        super().__init__()
        self.qkv, self.out, self.norm = nn.Linear(d, 3 * d), nn.Linear(d, d), nn.LayerNorm(d)
        self.heads = heads

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, d)
        return self.norm(x + self.out(a))


def test_named_backend_compiles_the_whole_model():
    torch.manual_seed(0)
    model, x = ConvNet().eval(), torch.randn(2, 3, 11, 13)
    be = strict_backend()
    with torch.no_grad():
        got = torch.compile(model, backend=be)(x)
        assert_close(got.numpy(), model(x).numpy(), rtol=1e-5, atol=1e-5)
        # the entry point: torch finds "ext" without ext.dynamo imported by name
        named = torch.compile(model, backend="ext")(x)
        assert_close(named.numpy(), model(x).numpy(), rtol=1e-5, atol=1e-5)
    assert [(g.builds, g.eager_reason) for g in be.graphs] == [(1, None)]


def test_graph_breaks_run_between_compiled_graphs():
    class Branchy(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(6, 6), nn.Linear(6, 3)

        def forward(self, x):
            h = torch.tanh(self.a(x))
            if h.sum() > 0:  # data-dependent: dynamo breaks the graph here
                h = h * 2
            else:
                h = h - 1
            return self.b(h), x.shape[0]  # a size among the outputs

    torch.manual_seed(1)
    model, be = Branchy().eval(), strict_backend()
    compiled = torch.compile(model, backend=be)
    with torch.no_grad():
        for x in (torch.randn(4, 6), -torch.ones(4, 6) * 3):
            got, n = compiled(x)
            ref, n_ref = model(x)
            assert n == n_ref == 4
            assert_close(got.numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)
    assert len(be.graphs) >= 2 and all(g.eager_reason is None and g.builds == 1 for g in be.graphs)


@pytest.mark.parametrize("dynamic", [True, None])
def test_symbolic_sizes_build_once(dynamic):
    torch.manual_seed(2)
    model, be = Encoder().eval(), strict_backend()
    compiled = torch.compile(model, backend=be, dynamic=dynamic)
    with torch.no_grad():
        for n in (5, 17, 9, 31):
            x = torch.randn(2, n, 16)
            assert_close(compiled(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-5)
    # dynamic=True: one symbolic graph; automatic: the first call's static graph, then one
    # symbolic graph for every later length
    assert [g.dynamic for g in be.graphs] == ([True] if dynamic else [False, True])
    assert all(g.builds == 1 and g.eager_reason is None for g in be.graphs)


def test_new_weights_rebuild():
    torch.manual_seed(3)
    model, be = ConvNet().eval(), strict_backend()
    compiled = torch.compile(model, backend=be)
    x = torch.randn(1, 3, 8, 8)
    with torch.no_grad():
        before = compiled(x)
        other = ConvNet().state_dict()
        model.load_state_dict(other)  # in place: the version counters move
        after = compiled(x)
        assert_close(after.numpy(), model(x).numpy(), rtol=1e-5, atol=1e-5)
        assert not np.allclose(before.numpy(), after.numpy())
        model.fc.weight = nn.Parameter(torch.randn(5, 8))  # a new tensor object
        assert_close(compiled(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-5)
    assert [g.builds for g in be.graphs] == [3]


def test_in_place_writes_run_in_pytorch():
    class Writes(nn.Module):
        def forward(self, x):
            x.add_(1)  # the caller sees x changed
            return x * 2

    model = Writes()
    be = ext.dynamo.make_backend()
    x, ref_x = torch.randn(3, 4), None
    ref_x = x.clone()
    with pytest.warns(ext.dynamo.ExtCompileWarning, match="writes in place"):
        got = torch.compile(model, backend=be)(x)
    ref = model(ref_x)
    assert torch.equal(x, ref_x) and torch.equal(got, ref)
    assert be.graphs[0].eager_reason.startswith("MutationError")
    torch._dynamo.reset()
    with pytest.raises(Exception, match="writes in place"):
        torch.compile(model, backend=strict_backend())(torch.randn(3, 4))


def test_unsupported_operator_runs_in_pytorch():
    def f(x):
        return torch.special.zeta(x.abs() + 1.5, torch.full_like(x, 2.0)) + 1

    be = ext.dynamo.make_backend()
    x = torch.rand(5)
    with pytest.warns(ext.dynamo.ExtCompileWarning, match="zeta"):
        got = torch.compile(f, backend=be)(x)
    assert_close(got.numpy(), f(x).numpy(), rtol=1e-6, atol=0)
    assert "UnsupportedOperatorError" in be.graphs[0].eager_reason
    torch._dynamo.reset()
    with pytest.raises(Exception, match="special_zeta"):  # torch.compile's options reach the backend
        torch.compile(f, backend="ext", options={"strict": True})(x)


def test_nan_odd_inputs_and_dtypes():
    def f(x, idx):
        y = torch.relu(x) + x.sum(-1, keepdim=True)
        return y, y.argmax(-1), y > 0, idx * 2

    be = strict_backend()
    base = torch.randn(5, 9)
    base[1, 3] = float("nan")
    x = base[:, 1:8]  # not contiguous, not 64-byte aligned
    idx = torch.arange(7, dtype=torch.int64)
    got = torch.compile(f, backend=be)(x, idx)
    ref = f(x, idx)
    for g, r in zip(got, ref):
        assert g.dtype == r.dtype and g.shape == r.shape
        assert_close(g.numpy().astype("float64"), r.numpy().astype("float64"), rtol=1e-6, atol=1e-6)
    assert torch.isnan(got[0][1]).all()  # the NaN's row: every output NaN, as in PyTorch
    assert [g.builds for g in be.graphs] == [1]


def test_outputs_carry_no_gradient_and_say_so():
    model = nn.Linear(4, 2)
    with pytest.warns(ext.dynamo.ExtCompileWarning, match="no gradient"):
        y = torch.compile(model, backend=strict_backend())(torch.randn(3, 4))
    assert not y.requires_grad
    with warnings.catch_warnings():
        warnings.simplefilter("error", ext.dynamo.ExtCompileWarning)
        with torch.inference_mode():
            torch.compile(model, backend=strict_backend())(torch.randn(3, 4))


def test_a_model_torch_export_refuses_compiles_in_pieces():
    """Longformer: ``torch.export`` stops at a data-dependent guard; under dynamo the branch on
    ``is_index_global_attn.any().item()`` breaks the graph, and both sides build (its sliding
    windows are ``as_strided`` views of a transposed tensor, its mask a ``full_like(-inf)``)."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.LongformerConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                        intermediate_size=64, attention_window=[8], vocab_size=100,
                                        max_position_embeddings=80)
    model = transformers.LongformerModel(cfg).eval()
    ids = torch.randint(0, 100, (1, 24))
    be = strict_backend()
    with torch.no_grad():
        got = torch.compile(model, backend=be)(ids).last_hidden_state
        assert_close(got.numpy(), model(ids).last_hidden_state.numpy(), rtol=1e-5, atol=1e-5)
    assert len(be.graphs) >= 2 and all(g.builds == 1 for g in be.graphs)


def test_from_torch_names_the_writes_it_leaves_out():
    class Counts(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("seen", torch.zeros(()))

        def forward(self, x):
            self.seen.add_(1)
            return x * self.seen

    x = torch.randn(3)
    with pytest.warns(UserWarning, match=r"writes in place to seen \(buffer mutation\)"):
        ext.frontend.from_torch(Counts(), (x,))
    with pytest.raises(ext.frontend.MutationError, match="seen"):
        ext.frontend.from_torch(Counts(), (x,), refuse_mutations=True)


def test_generate_with_a_compiled_forward():
    """transformers' ``generate`` with ``model.forward`` compiled: the prompt, the first step and
    one symbolic graph for every later cache length, each built once; greedy tokens as eager's."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    lm = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=200,
                                                              n_positions=64, bos_token_id=0, eos_token_id=0)).eval()
    ids = torch.randint(1, 200, (1, 5))
    with torch.no_grad():
        want = lm.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=0)
        be = strict_backend()
        lm.forward = torch.compile(lm.forward, backend=be)
        got = lm.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=0)
    assert torch.equal(got, want)
    assert [g.builds for g in be.graphs] == [1] * len(be.graphs) and be.graphs[-1].dynamic


def test_an_export_failure_points_to_torch_compile():
    class Branches(nn.Module):
        def forward(self, x):
            return x * 2 if x.sum().item() > 0 else x

    with pytest.raises(Exception) as info:
        ext.frontend.from_torch(Branches(), (torch.randn(3),))
    assert any('backend="ext"' in note for note in getattr(info.value, "__notes__", []))
    x = torch.randn(3)
    assert_close(torch.compile(Branches(), backend=strict_backend())(x).numpy(), Branches()(x).numpy(), rtol=0, atol=0)
