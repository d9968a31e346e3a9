"""Small built-in models (random weights, seeded; no downloads) for demos, benchmarks and tests.

``torch_model(name)`` returns ``(module, example_inputs)`` for the PyTorch-defined
models; ``gemm.dense``/``gemm.mlp`` and ``conv.conv_bias_relu`` build Relax modules directly (no
torch needed).
"""
from __future__ import annotations

TORCH_MODELS = ("resnet18", "resnet50", "encoder", "mlp")


def torch_model(name: str, *, batch: int = 1, small: bool = False, seed: int = 0):
    """``(torch module in eval mode, example input tuple)`` for a built-in model.

    ``small`` shrinks widths/resolution for fast tests (same structure).
    """
    import torch

    torch.manual_seed(seed)
    if name in ("resnet18", "resnet50"):
        from .resnet import resnet

        depth = int(name[6:])
        m = resnet(depth, width=16 if small else 64, num_classes=10 if small else 1000, seed=seed)
        res = 64 if small else 224
        return m, (torch.randn(batch, 3, res, res),)
    if name == "encoder":
        from .transformer import encoder_layer

        hidden, heads, ffn, seq = (64, 4, 128, 16) if small else (768, 12, 3072, 128)
        return encoder_layer(hidden, heads, ffn, seed=seed), (torch.randn(batch, seq, hidden),)
    if name == "mlp":
        sizes = (64, 32, 10) if small else (784, 512, 256, 10)
        layers = []
        for i, (k, n) in enumerate(zip(sizes[:-1], sizes[1:])):
            layers.append(torch.nn.Linear(k, n))
            if i < len(sizes) - 2:
                layers.append(torch.nn.ReLU())
        return torch.nn.Sequential(*layers).eval(), (torch.randn(max(batch, 1) * 32, sizes[0]),)
    raise ValueError(f"unknown model {name!r}; built-in models: {TORCH_MODELS}")
