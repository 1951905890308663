"""The scaling matrix of examples/distributed_sage.py: 1 and 2 GPUs at the
same global batch, our layers and PyG's, fp32 and bf16; a table and JSON.

    python examples/distributed_scaling.py --out scaling_results
    python examples/distributed_scaling.py --out r --layers sage gatv2 -- --max-steps 100

Every configuration runs the example in its own processes (spawned, one per
GPU) and writes its JSON next to its log in --out; then a table of seed
nodes per second, time per epoch (the mean over epochs after the first),
the 2-vs-1 speed-up and ours-vs-PyG is printed and written to
--out/scaling.md and --out/scaling.json. Arguments after ``--`` go to every
run of the example.
"""
from __future__ import annotations

import argparse
import itertools
import json
import pathlib
import subprocess
import sys
import time

EXAMPLE = pathlib.Path(__file__).resolve().parent / "distributed_sage.py"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--out", type=pathlib.Path, required=True, help="folder for the results")
    parser.add_argument("--graph", default="products-like")
    parser.add_argument("--layers", nargs="+", default=["sage"], choices=["sage", "gcn", "gatv2"])
    parser.add_argument("--impls", nargs="+", default=["ours", "pyg"], choices=["ours", "pyg"])
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"],
                        choices=["fp32", "bf16"])
    parser.add_argument("--world-sizes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=1024, help="global batch")
    parser.add_argument("--eval-nodes", type=int, default=2000)
    parser.add_argument("--device", default=None, help="cuda or cpu (default: the example's)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per configuration")
    parser.add_argument("example_args", nargs="*", help="after --: more arguments of the example")
    return parser.parse_args(argv)


def run_matrix(args) -> list:
    """Runs every configuration; one record per run (``status`` ok or why not)."""
    args.out.mkdir(parents=True, exist_ok=True)
    configs = list(itertools.product(args.layers, args.precisions, args.impls, args.world_sizes))
    records = []
    for i, (layer, precision, impl, world_size) in enumerate(configs, 1):
        name = f"{layer}_{precision}_{impl}_{world_size}gpu"
        command = [sys.executable, str(EXAMPLE), "--graph", args.graph, "--layer", layer,
                   "--impl", impl, "--world-size", str(world_size), "--epochs", str(args.epochs),
                   "--batch-size", str(args.batch_size), "--eval-nodes", str(args.eval_nodes),
                   "--json", str(args.out / f"{name}.json")]
        command += (["--bf16"] if precision == "bf16" else []) + \
            (["--device", args.device] if args.device else []) + args.example_args
        print(f"[{i}/{len(configs)}] {name}: {' '.join(command[1:])}", flush=True)
        record = {"layer": layer, "precision": precision, "impl": impl, "world_size": world_size}
        start = time.perf_counter()
        with open(args.out / f"{name}.log", "w") as log:
            try:
                code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT,
                                      timeout=args.timeout).returncode
                record["status"] = "ok" if code == 0 else f"exit status {code}"
            except subprocess.TimeoutExpired:
                record["status"] = f"timed out after {args.timeout:.0f} s"
        if record["status"] == "ok":
            result = json.loads((args.out / f"{name}.json").read_text())
            record.update(result["summary"], device=result["device"], sampler=result["sampler"],
                          steps_per_epoch=result["epochs"][-1]["steps_per_rank"])
        print(f"    {record['status']} in {time.perf_counter() - start:.0f} s"
              + (f": {record['seeds_per_s']:,.0f} seeds/s, {record['epoch_s']:.2f} s per epoch"
                 if record["status"] == "ok" else f" (log: {args.out / name}.log)"), flush=True)
        records.append(record)
    return records


def table(records: list) -> str:
    """A Markdown table: one row per run, with the speed-up over the same
    configuration on the fewest GPUs and ours against PyG at the same
    world size (PyG's time per epoch / ours)."""
    def find(**key):
        return next((r for r in records if r["status"] == "ok"
                     and all(r[k] == v for k, v in key.items())), None)

    lines = ["| layer | precision | impl | ranks | seeds/s | s/epoch | speed-up vs "
             f"{min(r['world_size'] for r in records)} rank(s) | PyG s/epoch / ours | val acc |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in records:
        if r["status"] != "ok":
            lines.append(f"| {r['layer']} | {r['precision']} | {r['impl']} | "
                         f"{r['world_size']} | {r['status']} | | | | |")
            continue
        fewest = find(layer=r["layer"], precision=r["precision"], impl=r["impl"],
                      world_size=min(x["world_size"] for x in records))
        pyg = find(layer=r["layer"], precision=r["precision"], impl="pyg",
                   world_size=r["world_size"])
        speedup = f"{r['seeds_per_s'] / fewest['seeds_per_s']:.2f}x" if fewest else ""
        versus = f"{pyg['epoch_s'] / r['epoch_s']:.2f}x" if pyg and r["impl"] == "ours" else ""
        accuracy = f"{r['val_acc']:.3f}" if "val_acc" in r else ""
        lines.append(f"| {r['layer']} | {r['precision']} | {r['impl']} | {r['world_size']} | "
                     f"{r['seeds_per_s']:,.0f} | {r['epoch_s']:.2f} | {speedup} | {versus} | "
                     f"{accuracy} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    start = time.perf_counter()
    records = run_matrix(args)
    devices = sorted({r["device"] for r in records if "device" in r})
    samplers = sorted({r["sampler"] for r in records if "sampler" in r})
    header = (f"{args.graph}, global batch {args.batch_size}, {args.epochs} epochs per run "
              f"(timed: all but the first); device: {', '.join(devices) or 'unknown'}; "
              f"sampler: {'; '.join(samplers) or 'unknown'}")
    text = header + "\n\n" + table(records)
    print("\n" + text, flush=True)
    (args.out / "scaling.md").write_text(text + "\n")
    (args.out / "scaling.json").write_text(json.dumps(
        {"config": {k: (str(v) if isinstance(v, pathlib.Path) else v)
                    for k, v in vars(args).items()},
         "devices": devices, "runs": records, "table": text,
         "seconds": time.perf_counter() - start}, indent=1))
    print(f"wrote {args.out / 'scaling.md'} and {args.out / 'scaling.json'} "
          f"({time.perf_counter() - start:.0f} s)")
    return 0 if all(r["status"] == "ok" for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
