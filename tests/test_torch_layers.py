"""PyTorch layers beyond the zoo's: each imports, builds and matches PyTorch (odd sizes)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import tvm
from tvm import relax

import ext
from ext.frontend import from_torch
from ext.testing import assert_close
from torch_helpers import torch_and_ext


class Call(torch.nn.Module):
    def __init__(self, fn, *layers):
        super().__init__()
        self.fn, self.layers = fn, torch.nn.ModuleList(layers)

    def forward(self, *x):
        return self.fn(self.layers, *x)


F = torch.nn.functional
CASES = {
    "lstm": (lambda: Call(lambda m, x: m[0](x)[0], torch.nn.LSTM(16, 24, batch_first=True)), [(2, 7, 16)]),
    "gru_2_layers": (lambda: Call(lambda m, x: m[0](x)[0], torch.nn.GRU(16, 24, num_layers=2, batch_first=True)), [(1, 5, 16)]),
    "conv_transpose": (lambda: Call(lambda m, x: m[0](x), torch.nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1)), [(1, 8, 9, 11)]),
    "pixel_shuffle": (lambda: Call(lambda m, x: F.pixel_shuffle(m[0](x), 2), torch.nn.Conv2d(4, 16, 3, padding=1)), [(1, 4, 7, 9)]),
    "bilinear_x2": (lambda: Call(lambda m, x: F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)), [(1, 3, 13, 17)]),
    "dilated_conv": (lambda: Call(lambda m, x: m[0](x), torch.nn.Conv2d(6, 10, 3, dilation=2, padding=2)), [(1, 6, 15, 15)]),
    "conv3d": (lambda: Call(lambda m, x: m[0](x), torch.nn.Conv3d(3, 5, 3, padding=1)), [(1, 3, 5, 7, 7)]),
    "multihead_attention": (lambda: Call(lambda m, x: m[0](x, x, x, need_weights=False)[0],
                                         torch.nn.MultiheadAttention(32, 4, batch_first=True)), [(2, 9, 32)]),
    "group_norm": (lambda: Call(lambda m, x: m[0](x), torch.nn.GroupNorm(4, 12)), [(2, 12, 5, 5)]),
    "instance_norm": (lambda: Call(lambda m, x: m[0](x), torch.nn.InstanceNorm2d(6, affine=True)), [(1, 6, 9, 9)]),
    "cumsum_where": (lambda: Call(lambda m, x: torch.where(x > 0, x.cumsum(-1), -x)), [(3, 11)]),
    "avg_pool_ceil": (lambda: Call(lambda m, x: F.avg_pool2d(x, 3, 2, padding=1, ceil_mode=True, count_include_pad=False)), [(1, 5, 10, 13)]),
    "adaptive_pool": (lambda: Call(lambda m, x: F.adaptive_avg_pool2d(x, (3, 5))), [(1, 4, 10, 13)]),
    "einsum_softmax": (lambda: Call(lambda m, x, y: torch.einsum("bij,bjk->bik", x, y).softmax(-1)), [(2, 5, 7), (2, 7, 3)]),
    # index tensors counting from the end (Falcon's multi-query heads: qkv[..., [-2], :])
    "index_negative": (lambda: Call(lambda m, x: x[..., [-2], :] * 2 + x[..., [-1, 0], :].sum(-2, keepdim=True)),
                       [(2, 5, 6, 3)]),
    # several index tensors with slices around them: adjacent ones keep their place (B in the
    # middle), split ones put B first; PyTorch's rules, which the importer broadcast wrongly
    "index_after_slice": (lambda: Call(lambda m, x: x[:, torch.tensor([[0, 2], [1, 1]]), torch.tensor([1, -1])]),
                          [(3, 4, 5, 6)]),
    "index_split_by_slice": (lambda: Call(lambda m, x: x[torch.tensor([2, 0, 1]), :, torch.tensor([[4], [0]])]),
                             [(3, 4, 5, 6)]),
    "unfold_3x1": (lambda: Call(lambda m, x: F.unfold(x, (3, 1), padding=(1, 0))), [(1, 4, 7, 2)]),
    "unfold_strided": (lambda: Call(lambda m, x: F.unfold(x, 3, stride=2, padding=1)), [(2, 3, 9, 8)]),
    # a float tensor divided by a Python int with rounding (DETR's sine position embedding)
    "div_rounding_by_int": (lambda: Call(lambda m, x: torch.div(x * 7, 2, rounding_mode="floor")
                                         + torch.div(x * 5, 3, rounding_mode="trunc")), [(3, 7)]),
    # PyTorch's grid is [N, H, W, 2]; Relax's grid_sample reads [N, 2, H, W] (Deformable DETR)
    "grid_sample_bilinear": (lambda: Call(lambda m, x, g: F.grid_sample(x, g, align_corners=False)), [(2, 3, 7, 9), (2, 5, 4, 2)]),
    "grid_sample_border_aligned": (lambda: Call(lambda m, x, g: F.grid_sample(x, g, padding_mode="border", align_corners=True)),
                                   [(1, 2, 6, 5), (1, 3, 7, 2)]),
    "grid_sample_nearest": (lambda: Call(lambda m, x, g: F.grid_sample(x, g, mode="nearest", align_corners=False)),
                            [(1, 4, 5, 8), (1, 6, 3, 2)]),
    # Relax's arange miscounts some negative steps (arange(16, -16, -1): 34 elements)
    "arange_down": (lambda: Call(lambda m, x: x + torch.arange(16, -16, -1) + torch.arange(2.5, -13.5, -0.5)),
                    [(2, 32)]),
    # integer and bool tensors in float arithmetic take the result's dtype, as PyTorch promotes:
    # the importer divided int64 by int64 as integers (arange(8) / 2 truncated: a wrong answer)
    "int_true_divide": (lambda: Call(lambda m, x: x + torch.arange(1, 9) / 2 + torch.div(torch.arange(8), torch.arange(1, 9))),
                        [(2, 8)]),
    "int_float_scalars": (lambda: Call(lambda m, x: x + torch.arange(8) * 0.5 + (1.5 - torch.arange(8)) + torch.arange(8) ** 0.5
                                       + (x > 0) * 0.25), [(2, 8)]),
    "where_int_float": (lambda: Call(lambda m, x: torch.where(x > 0, torch.arange(8), x)), [(2, 8)]),
    # an unsorted top-k (DeepSeek-V3's group routing): the importer rejected sorted=False
    "topk_unsorted_mask": (lambda: Call(lambda m, x: torch.zeros_like(x).scatter(-1, torch.topk(x, 3, -1, sorted=False).indices, 1.0) * x
                                        + torch.topk(x, 2, 0, largest=False, sorted=False).values.sum(0)), [(4, 9)]),
    # log of int64 was rejected by Relax (DeBERTa-v2's log-bucketed relative positions)
    "log_of_int": (lambda: Call(lambda m, x: x + torch.log(torch.arange(1, 9)) + torch.sqrt(torch.arange(8))
                                + torch.exp(-torch.arange(8))), [(2, 8)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_layer_builds_and_matches_pytorch(cpu_target, name):
    make, shapes = CASES[name]
    torch.manual_seed(0)
    inputs = [torch.randn(*s) for s in shapes]
    got, want = torch_and_ext(make().eval(), inputs, cpu_target)
    scale = max(float(np.abs(want).max()), 1e-30)
    assert_close(got, want, rtol=1e-4, atol=1e-4 * scale, what=name)


def test_bool_cumsum_counts_in_int64(cpu_target):
    """PyTorch sums a bool tensor in int64; TVM's importer kept it bool (LLVM then refused the
    bool add). transformers' packed-sequence check is this pattern."""
    class Packed(torch.nn.Module):
        def forward(self, pos):
            starts = (pos.diff(dim=-1, prepend=pos[:, :1] - 1) != 1).cumsum(-1)
            return starts * 10 + (starts == starts[:, -1:]).long()

    pos = torch.tensor([[0, 1, 2, 0, 1, 0, 1, 2, 3, 4, 0]])
    ex = ext.build(from_torch(Packed().eval(), (pos,)), cpu_target)
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(pos.numpy())).numpy()
    want = Packed()(pos).numpy()
    assert got.dtype == want.dtype == np.int64 and (got == want).all(), (got, want)


@pytest.mark.parametrize("use_cache", [False, True])
def test_hf_decoder_without_attention_mask(cpu_target, use_cache):
    """A decoder called with input ids alone (transformers then runs the packed-sequence check);
    with ``use_cache`` its DynamicCache concatenates each layer's keys onto ``torch.tensor([])``."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.Qwen2Config(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                                   intermediate_size=64, vocab_size=97, use_cache=use_cache)
    torch.manual_seed(0)
    decoder = transformers.Qwen2Model(cfg).eval()
    model = Call(lambda m, ids: m[0](input_ids=ids).last_hidden_state, decoder).eval()
    ids = torch.randint(0, 97, (1, 11))
    with torch.no_grad():
        want = model(ids).numpy()
    ex = ext.build(from_torch(model, (ids,)), cpu_target)
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(ids.numpy())).numpy()
    assert_close(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()), what="Qwen2 without a mask")


def test_cat_skips_empty_1d_inputs_like_pytorch(cpu_target):
    class Grow(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("empty", torch.tensor([]), persistent=False)

        def forward(self, x):
            return torch.cat([self.empty, x, self.empty], dim=-2) * 2

    x = torch.randn(1, 2, 5, 3)
    ex = ext.build(from_torch(Grow().eval(), (x,)), cpu_target)
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x.numpy())).numpy()
    assert_close(got, (x * 2).numpy(), rtol=0, atol=0, what="cat with empty inputs")


def test_hf_mixture_of_experts_imports_with_batched_experts(cpu_target):
    """transformers runs MoE experts with grouped_mm (histc offsets, a custom op) by default;
    from_torch exports them with transformers' batched_mm and restores the model's setting."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.MixtralConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                                     intermediate_size=48, vocab_size=97, num_local_experts=5, num_experts_per_tok=2,
                                     use_cache=False)
    torch.manual_seed(0)
    decoder = transformers.MixtralModel(cfg).eval()
    before = decoder.get_experts_implementation()
    model = Call(lambda m, ids: m[0](input_ids=ids).last_hidden_state, decoder).eval()
    ids = torch.randint(0, 97, (1, 9))
    with torch.no_grad():
        want = model(ids).numpy()
    ex = ext.build(from_torch(model, (ids,)), cpu_target)
    assert decoder.get_experts_implementation() == before
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(ids.numpy())).numpy()
    assert_close(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()), what="Mixtral")


def test_hf_decoder_with_a_padding_mask_and_a_batch(cpu_target):
    """GPT-2 with an attention mask and 3 sequences: PyTorch's own decomposition stopped on the
    ``view`` after the decomposed attention (its output laid out transposed); from_torch takes
    the views as reshapes then. Padded positions and a left-padded row included."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(n_embd=32, n_layer=1, n_head=4, vocab_size=97, n_positions=64, use_cache=False)
    torch.manual_seed(0)
    decoder = transformers.GPT2Model(cfg).eval()
    model = Call(lambda m, ids, mask: m[0](input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state,
                 decoder).eval()
    ids = torch.randint(0, 97, (3, 11))
    mask = torch.ones(3, 11, dtype=torch.long)
    mask[1, 7:] = 0
    mask[2, :4] = 0
    with torch.no_grad():
        want = model(ids, mask).numpy()
    ex = ext.build(from_torch(model, (ids, mask)), cpu_target)
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](*(tvm.runtime.tensor(t.numpy()) for t in (ids, mask))).numpy()
    assert np.isnan(got).sum() == np.isnan(want).sum()
    assert_close(got, want, rtol=1e-4, atol=1e-4 * float(np.nanmax(np.abs(want))), what="GPT-2 with a padding mask")


def test_triu_and_tril_indices_gather_pairwise_interactions(cpu_target):
    """DLRM's feature interaction: the upper triangle of a batched Gram matrix, picked with
    ``triu_indices`` (and ``tril_indices`` with an offset): the importer had neither."""
    class Interact(torch.nn.Module):
        def forward(self, feats):
            gram = torch.bmm(feats, feats.transpose(1, 2))
            up, low = torch.triu_indices(5, 5, 1), torch.tril_indices(5, 5, -2)
            return torch.cat([gram[:, up[0], up[1]], gram[:, low[0], low[1]] * 0.5], 1)

    x = torch.randn(3, 5, 7)
    model = Interact().eval()
    mod = ext.frontend.from_torch(model, (x,))
    got = relax.VirtualMachine(ext.build(mod, cpu_target), tvm.cpu())["main"](tvm.runtime.tensor(x.numpy())).numpy()
    assert_close(got, model(x).numpy(), rtol=1e-5, atol=1e-5, what="pairwise interactions")
