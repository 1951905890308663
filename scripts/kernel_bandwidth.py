"""The attention and min / max kernels alone (GATv2 and graph-transformer
forward, attention weights and backward; neighbour min / max forward,
forward with arg, backward), per graph, shape and dtype: ms and share of
the device's copy bandwidth under the benchmark's bytes models. A lean twin
of the benchmark's kernel rows (no layer, no baseline), for trying kernel
changes on the large suite graphs in little device time.

    PYTHONPATH=src python scripts/kernel_bandwidth.py \
        --graphs arxiv-like,pokec-like --shapes gatv2:2x64,transformer:4x128,min:512

With --breakdown each timed call's CUDA kernels are listed too (ms a call).
Shapes min-relu:D and max-relu:D time min / max on ReLU features, where
ties at 0 walk (the input of a hidden layer; the suite's are normal).
"""
import argparse

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from pyg_ioaware.bench.bandwidth import copy_bandwidth_gbs, time_back_to_back
from pyg_ioaware.bench.cases import Workload
from pyg_ioaware.bench.cases.attention import _gatv2_kernels
from pyg_ioaware.bench.cases.reduce import _minmax_kernels
from pyg_ioaware.bench.cases.transformer import _transformer_kernels
from pyg_ioaware.bench.graphs import generate


def heads_channels(dims: str):
    """(heads, channels) of an attention shape HEADSxCHANNELS."""
    return tuple(int(n) for n in dims.split("x"))


# family -> kernels builder from the shape after the colon (HEADSxCHANNELS
# for attention, the feature width for min / max)
FAMILIES = {
    "gatv2": lambda dims: _gatv2_kernels(*heads_channels(dims)),
    "transformer": lambda dims: _transformer_kernels(*heads_channels(dims)),
    "min": lambda dims: _minmax_kernels("min", int(dims)),
    "max": lambda dims: _minmax_kernels("max", int(dims)),
    # ReLU features: ties at 0 (min: most elements; max: where no neighbour is positive)
    "min-relu": lambda dims: _minmax_kernels("min", int(dims), "relu"),
    "max-relu": lambda dims: _minmax_kernels("max", int(dims), "relu"),
}
# kernel name without its family -> the kind --kernels selects by
KINDS = {"attention weights": "weights", "fwd + arg": "fwd+arg",
         "bwd deterministic (CSR^T)": "deterministic", "bwd buckets (CSR^T)": "buckets"}


def kind_of(name: str) -> str:
    """fwd, fwd+arg, weights, bwd, deterministic or buckets."""
    rest = name.split(" ", 1)[1]
    return KINDS.get(rest, rest.split()[0])


def print_breakdown(run, device: torch.device, calls: int = 3) -> None:
    """The CUDA kernels (on a CPU, the ops) of ``calls`` calls of ``run``
    under torch.profiler: ms a call each (launches of one name summed),
    longest first."""
    cuda = device.type == "cuda"
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            run()
        if cuda:
            torch.cuda.synchronize(device)
    kind = DeviceType.CUDA if cuda else DeviceType.CPU
    events = [e for e in prof.key_averages() if e.device_type == kind]
    total = (lambda e: e.self_device_time_total) if cuda else (lambda e: e.self_cpu_time_total)
    for e in sorted(events, key=lambda e: -total(e)):
        print(f"{'':40s} {total(e) / calls / 1e3:8.3f}  {e.count / calls:4.1f}x  {e.key[:90]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", default="arxiv-like,pokec-like")
    parser.add_argument("--shapes", default="gatv2:2x64,transformer:4x128",
                        help="family:SHAPE, comma separated (gatv2:2x64, min:512; "
                             "min-relu:512 and max-relu:512 on ReLU features)")
    parser.add_argument("--dtypes", default="fp32,bf16")
    parser.add_argument("--kernels", default="fwd,fwd+arg,bwd,buckets",
                        help="which of fwd, fwd+arg, weights, bwd, deterministic, buckets to time")
    parser.add_argument("--scale", type=float, default=1.0, help="suite graph size factor")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--breakdown", action="store_true",
                        help="also list each timed call's CUDA kernels (torch.profiler), "
                             "ms a call")
    args = parser.parse_args()
    device = torch.device(args.device)
    copy_gbs = copy_bandwidth_gbs(device)
    wanted = set(args.kernels.split(","))
    where = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    print(f"device: {where}, copy {copy_gbs:.0f} GB/s")
    print(f"{'graph':14s} {'shape':17s} {'dtype':5s} {'kernel':32s} {'ms':>8s} {'share':>6s}")
    for name in args.graphs.split(","):
        edge_index, num_nodes = generate(name, args.scale, device=device)
        per_graph = {}
        for shape in args.shapes.split(","):
            family, dims = shape.split(":")
            for precision in args.dtypes.split(","):
                work = Workload(edge_index, num_nodes, precision, per_graph=per_graph)
                for kernel in FAMILIES[family](dims)(work):
                    if kind_of(kernel.name) not in wanted:
                        continue
                    ms = time_back_to_back(kernel.run, device)
                    share = kernel.min_bytes / (ms * 1e-3) / 1e9 / copy_gbs
                    print(f"{name:14s} {shape:17s} {precision:5s} {kernel.name:32s} "
                          f"{ms:8.3f} {share:6.0%}", flush=True)
                    if args.breakdown:
                        print_breakdown(kernel.run, device)
                torch.cuda.empty_cache()
        del edge_index, per_graph
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
