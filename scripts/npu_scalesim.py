"""ext's NPU simulator against SCALE-Sim 3 (PyPI ``scalesim``): compute cycles per layer.

For each ResNet-18 conv layer (224x224 input, batch 1) and each GEMM of a BERT-base encoder
layer (seq 128, hidden 768, ffn 3072, 12 heads), on 16x16 and 32x32 arrays with the ws and
os dataflows, prints our compute cycles (the tiling ext's selection picks for that
dataflow) next to SCALE-Sim's, their ratio and the utilization (useful MACs per PE-cycle,
the same formula on both cycle counts).

Like for like:

* memories: SCALE-Sim's SRAM sizes are in 1-byte words; ours hold float32, so our
  scratchpad is 4 x (ifmap + filter KB) and our accumulator 4 x ofmap KB (the same number
  of words; ``--ifmap-kb/--filter-kb/--ofmap-kb``, SCALE-Sim's defaults 256/256/128);
* bandwidth: SCALE-Sim runs in CALC mode (it sizes the DRAM bandwidth so nothing stalls);
  ours gets a bandwidth no layer saturates, so a layer's cycles are its compute cycles;
* SCALE-Sim's compute cycles are the rows of its compute module's demand matrices (its
  ``systolic_compute_ws/os``), i.e. its total cycles without memory stalls. Its memory
  stage (``double_buffered_scratchpad_mem``) is not run: in scalesim 3.0.0 it fails under
  NumPy 2 (``int(max(...))`` on 1-element arrays) and CALC mode adds no stalls anyway;
* SCALE-Sim has no padding and rounds the output size up (``ceil((H - R + S) / S)``); each
  conv is given the input extent the padded PyTorch conv really reads,
  ``(OH - 1) * S + R``, so both count the same output pixels;
* a GEMM ``M x N x K`` is SCALE-Sim's GEMM mode entry ``[M, K, 1, K, 1, N, 1, 1]``.

Run: ``python scripts/npu_scalesim.py [--arrays 16 32] [--dataflows ws os] [--quick] [--json out.json]``
(CPU work, a few minutes; one process).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from ext.npu import kernels  # noqa: E402
from ext.npu.target import ArrayConfig  # noqa: E402

#: (name, C, O, H, kernel, stride, pad, uses) of ResNet-18's convs at 224x224
RESNET18 = [
    ("conv1 7x7/2", 3, 64, 224, 7, 2, 3, 1),
    ("l1 3x3 64", 64, 64, 56, 3, 1, 1, 4),
    ("l2 3x3/2 64->128", 64, 128, 56, 3, 2, 1, 1),
    ("l2 3x3 128", 128, 128, 28, 3, 1, 1, 3),
    ("l2 ds 1x1/2", 64, 128, 56, 1, 2, 0, 1),
    ("l3 3x3/2 128->256", 128, 256, 28, 3, 2, 1, 1),
    ("l3 3x3 256", 256, 256, 14, 3, 1, 1, 3),
    ("l3 ds 1x1/2", 128, 256, 28, 1, 2, 0, 1),
    ("l4 3x3/2 256->512", 256, 512, 14, 3, 2, 1, 1),
    ("l4 3x3 512", 512, 512, 7, 3, 1, 1, 3),
    ("l4 ds 1x1/2", 256, 512, 14, 1, 2, 0, 1),
]

#: (name, M, N, K, uses) of a BERT-base encoder layer at seq 128
BERT = [
    ("q/k/v/o proj", 128, 768, 768, 4),
    ("ffn up", 128, 3072, 768, 1),
    ("ffn down", 128, 768, 3072, 1),
    ("attn q@k^T (per head)", 128, 128, 64, 12),
    ("attn p@v (per head)", 128, 64, 128, 12),
]


def layers(quick: bool) -> list[dict]:
    """Every layer as its GEMM (M, N, K) and SCALE-Sim topology entry."""
    out = []
    for name, c, o, h, k, s, p, uses in RESNET18[:3] if quick else RESNET18:
        oh = (h + 2 * p - k) // s + 1
        extent = (oh - 1) * s + k  # what the padded conv reads; SCALE-Sim then gets oh outputs
        out.append({"model": "resnet18", "layer": name, "M": oh * oh, "N": o, "K": c * k * k, "uses": uses,
                     "entry": [name, extent, extent, k, k, c, o, s, s]})
    for name, m, n, k, uses in BERT[:2] if quick else BERT:
        out.append({"model": "bert", "layer": name, "M": m, "N": n, "K": k, "uses": uses,
                    "entry": [name, m, k, 1, k, 1, n, 1, 1]})
    return out


def scalesim_cycles(entry: list, rows: int, cols: int, dataflow: str, kb: tuple) -> int:
    """SCALE-Sim's compute cycles of one layer (demand-matrix rows of its compute module)."""
    from scalesim.layout_utils import layouts
    from scalesim.scale_config import scale_config
    from scalesim.single_layer_sim import single_layer_sim
    from scalesim.topology_utils import topologies

    cfg = scale_config()
    cfg.set_arr_dims(rows, cols)
    cfg.set_dataflow(dataflow)
    cfg.set_buffer_sizes_kb(*kb)
    cfg.force_valid()
    cfg.set_bw_mode_to_calc()
    topo = topologies()
    topo.load_layer_params_from_list(entry[0], list(entry) + [1, 1])  # + sparsity 1:1 (dense)
    topo.topo_calc_hyperparams()
    layer = single_layer_sim()
    layer.set_params(layer_id=0, config_obj=cfg, topology_obj=topo, layout_obj=layouts(), verbose=False)
    ops = layer.op_mat_obj
    (_, ifm), (_, flt), (_, ofm) = ops.get_ifmap_matrix(), ops.get_filter_matrix(), ops.get_ofmap_matrix()
    layer.compute_system.set_params(config_obj=cfg, ifmap_op_mat=ifm, filter_op_mat=flt, ofmap_op_mat=ofm)
    ifmap_demand, _, ofmap_demand = layer.compute_system.get_demand_matrices()
    if ifmap_demand.shape[0] != ofmap_demand.shape[0]:
        raise RuntimeError(f"SCALE-Sim demand matrices disagree: {ifmap_demand.shape} vs {ofmap_demand.shape}")
    return int(ofmap_demand.shape[0])


def ours(layer: dict, rows: int, cols: int, dataflow: str, kb: tuple):
    cfg = ArrayConfig(rows, cols, dataflow, spad_kib=4 * (kb[0] + kb[1]), acc_kib=4 * kb[2], bandwidth=1 << 16)
    tiling, est = kernels.best_tiling(layer["M"], layer["N"], layer["K"], cfg, dataflows=(dataflow,))
    return tiling, est


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arrays", type=int, nargs="+", default=[16, 32], help="square array sizes")
    ap.add_argument("--dataflows", nargs="+", default=["ws", "os"], choices=["ws", "os"])
    ap.add_argument("--ifmap-kb", type=int, default=256)
    ap.add_argument("--filter-kb", type=int, default=256)
    ap.add_argument("--ofmap-kb", type=int, default=128)
    ap.add_argument("--quick", action="store_true", help="three ResNet layers and two BERT GEMMs")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    import importlib.metadata

    kb = (args.ifmap_kb, args.filter_kb, args.ofmap_kb)
    print(f"SCALE-Sim {importlib.metadata.version('scalesim')}; SRAM ifmap/filter/ofmap {kb} KB words; "
          f"ours: scratchpad {4 * (kb[0] + kb[1])} KiB, accumulator {4 * kb[2]} KiB float32")
    head = ("model", "layer", "MxNxK", "array", "df", "ours", "scalesim", "ratio", "util ours", "util ss", "tiles")
    rows, table = [], [head]
    t0 = time.time()
    for n in args.arrays:
        for df in args.dataflows:
            for layer in layers(args.quick):
                tiling, est = ours(layer, n, n, df, kb)
                t1 = time.time()
                ss = scalesim_cycles(layer["entry"], n, n, df, kb)
                t1 = time.time() - t1
                macs = layer["M"] * layer["N"] * layer["K"]
                row = {**{k: v for k, v in layer.items() if k != "entry"}, "array": f"{n}x{n}", "dataflow": df,
                       "ours": est.compute_cycles, "scalesim": ss, "ratio": est.compute_cycles / ss,
                       "util_ours": est.utilization, "util_scalesim": macs / (n * n * ss),
                       "tiles": f"{tiling.tile_m}x{tiling.tile_n}x{tiling.tile_k}"}
                rows.append(row)
                table.append((row["model"], row["layer"], f"{layer['M']}x{layer['N']}x{layer['K']}", row["array"], df,
                              str(row["ours"]), str(ss), f"{row['ratio']:.4f}", f"{row['util_ours']:.1%}",
                              f"{row['util_scalesim']:.1%}", row["tiles"]))
                print(" | ".join(table[-1]) + f"   (SCALE-Sim {t1:.0f} s)", flush=True)
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    print("\n" + "\n".join("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |" for r in table))
    worst = max(rows, key=lambda r: abs(r["ratio"] - 1))
    print(f"\n{len(rows)} rows in {time.time() - t0:.0f} s; largest difference {abs(worst['ratio'] - 1):.2%} "
          f"({worst['model']} {worst['layer']} {worst['array']} {worst['dataflow']}); "
          f"{sum(abs(r['ratio'] - 1) <= 0.05 for r in rows)}/{len(rows)} within 5%")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
