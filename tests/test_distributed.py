"""DDP with our layers (examples/distributed_common.py, the code
examples/distributed_sage.py runs): two processes, each training on its own
mini-batch, end every step with the gradient one process gets from the mean
loss over both batches (equal batch sizes), for sage, gcn and gatv2; gloo on
the CPU, NCCL on two GPUs. Also the example end to end, spawned and under
torchrun (with batches prefetched in a thread), and the scaling table. A hung process group fails the test after a timeout."""
import faulthandler
import json
import os
import pathlib
import subprocess
import sys
import time

import pytest
import torch
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
sys.path.insert(0, str(EXAMPLES))
import distributed_common as common  # noqa: E402

WORLD_SIZE = 2
STEPS = 2
TIMEOUT_S = 120
FANOUT = [5, 3]
BATCH_SIZE = 24  # per rank


def make_batches(data, world_size=WORLD_SIZE):
    """batches[rank][step]: each rank's first STEPS mini-batches from its own
    shard of the training nodes, sampled as the example does."""
    batches = []
    for rank in range(world_size):
        seeds = common.shard_seeds(data.train_nodes, rank, world_size)
        loader = common.make_sampler(data, seeds, FANOUT, BATCH_SIZE, sampler="torch",
                                     seed=1 + rank)
        batches.append([batch for _, batch in zip(range(STEPS), loader)])
        assert all(b.batch_size == BATCH_SIZE for b in batches[-1])
    return batches


def make_model(layer, data, device):
    torch.manual_seed(0)
    return common.Net(layer, "ours", data.x.size(1), 32, data.num_classes,
                      num_layers=len(FANOUT)).to(device)


def train(model, data, batches_per_step, device):
    """STEPS SGD steps on the mean loss of each step's batches: the
    gradients of every step and the final parameters."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    grads = []
    for batches in batches_per_step:
        optimizer.zero_grad()
        losses = [common.batch_loss(model, b.to(device), data.x, data.y) for b in batches]
        (sum(losses) / len(losses)).backward()
        grads.append([p.grad.detach().cpu().clone() for p in model.parameters()])
        optimizer.step()
    return grads, [p.detach().cpu().clone() for p in model.parameters()]


def rank_worker(rank, device_kind, data, batches, layers, out_dir):
    """One DDP rank: every layer's gradients after all-reduce, saved to a file.
    A rank still running shortly before run_ranks gives up prints its
    threads' Python stacks (to the test's captured stderr)."""
    faulthandler.dump_traceback_later(TIMEOUT_S - 10)
    device = torch.device("cuda", rank) if device_kind == "cuda" else torch.device("cpu")
    common.init_process_group(rank, WORLD_SIZE, device, timeout_s=TIMEOUT_S / 2)
    try:
        data = data.to(device)
        results = {}
        for layer in layers:
            ddp = DistributedDataParallel(make_model(layer, data, device),
                                          device_ids=[rank] if device.type == "cuda" else None)
            results[layer] = train(ddp, data, [[b] for b in batches[rank]], device)
            del ddp  # its reducer goes before the process group it holds, not after
        torch.save(results, pathlib.Path(out_dir) / f"rank{rank}.pt")
    finally:
        torch.distributed.destroy_process_group()


def run_ranks(device_kind, data, batches, out_dir):
    """Spawns WORLD_SIZE ranks; fails (and kills them) past TIMEOUT_S."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(common.free_port())
    context = mp.start_processes(rank_worker, nprocs=WORLD_SIZE, join=False, start_method="spawn",
                                 args=(device_kind, data, batches, common.LAYERS, str(out_dir)))
    deadline = time.monotonic() + TIMEOUT_S
    while not context.join(timeout=1):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail(f"DDP ranks did not finish within {TIMEOUT_S} s")
    return [torch.load(out_dir / f"rank{r}.pt") for r in range(WORLD_SIZE)]


def ddp_and_reference(device_kind, tmp_path_factory):
    data = common.suite_dataset("arxiv-like", scale=0.01, seed=3)
    batches = make_batches(data)
    ranks = run_ranks(device_kind, data, batches, tmp_path_factory.mktemp(device_kind))
    device = torch.device("cuda", 0) if device_kind == "cuda" else torch.device("cpu")
    on_device = data.to(device)
    reference = {layer: train(make_model(layer, on_device, device), on_device,
                              list(zip(*batches)), device) for layer in common.LAYERS}
    rank0_alone = {layer: train(make_model(layer, on_device, device), on_device,
                                [batches[0][:1]], device)[0][0] for layer in common.LAYERS}
    return ranks, reference, rank0_alone


@pytest.fixture(scope="module")
def gloo_results(tmp_path_factory):
    return ddp_and_reference("cpu", tmp_path_factory)


@pytest.fixture(scope="module")
def nccl_results(tmp_path_factory):
    return ddp_and_reference("cuda", tmp_path_factory)


def relative_error(a, b):
    return float((a - b).abs().max() / b.abs().max().clamp(min=1e-12))


def check(results, layer, tolerance):
    ranks, reference, rank0_alone = results
    ref_grads, ref_params = reference[layer]
    for rank in ranks:
        grads, params = rank[layer]
        for step in range(STEPS):
            for got, want in zip(grads[step], ref_grads[step]):
                assert relative_error(got, want) < tolerance, (layer, step)
        for got, want in zip(params, ref_params):
            assert relative_error(got, want) < tolerance, layer
    # Not vacuous: rank 0's own batch alone gives another gradient.
    assert max(relative_error(g, h) for g, h in zip(rank0_alone[layer], ref_grads[0])) > 1e-2


@pytest.mark.parametrize("layer", common.LAYERS)
def test_gloo_gradients_match_one_process(gloo_results, layer):
    check(gloo_results, layer, 1e-5)


two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")


@pytest.mark.cuda
@two_gpus
@pytest.mark.parametrize("layer", common.LAYERS)
def test_nccl_gradients_match_one_process(nccl_results, layer):
    check(nccl_results, layer, 1e-4)


EXAMPLE_ARGS = ["--device", "cpu", "--graph", "cora", "--epochs", "2", "--batch-size", "32",
                "--hidden", "16", "--eval-nodes", "100", "--cpu-threads", "1"]


def check_example_output(path, world_size):
    result = json.loads(path.read_text())
    assert result["config"]["world_size"] == world_size
    assert [e["seeds"] for e in result["epochs"]] == [140, 140]  # Cora's training nodes
    assert result["summary"]["seeds_per_s"] > 0 and 0 <= result["summary"]["val_acc"] <= 1


def test_example_spawned(tmp_path):
    out = tmp_path / "spawned.json"
    subprocess.run([sys.executable, str(EXAMPLES / "distributed_sage.py"), "--world-size", "2",
                    "--layer", "gatv2", "--json", str(out)] + EXAMPLE_ARGS,
                   check=True, timeout=TIMEOUT_S)
    check_example_output(out, 2)


def test_example_under_torchrun(tmp_path):
    out = tmp_path / "torchrun.json"
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                    "--master-port", str(common.free_port()),
                    str(EXAMPLES / "distributed_sage.py"), "--prefetch", "2",
                    "--json", str(out)] + EXAMPLE_ARGS,
                   check=True, timeout=TIMEOUT_S)
    check_example_output(out, 2)


def test_scaling_table():
    import distributed_scaling
    records = [{"layer": "sage", "precision": "fp32", "impl": impl, "world_size": w,
                "status": "ok", "seeds_per_s": rate, "epoch_s": 100 / rate, "val_acc": 0.5}
               for impl, w, rate in [("ours", 1, 100.0), ("ours", 2, 180.0),
                                     ("pyg", 1, 50.0), ("pyg", 2, 90.0)]]
    records.append({"layer": "sage", "precision": "bf16", "impl": "pyg", "world_size": 2,
                    "status": "exit status 3"})
    rows = distributed_scaling.table(records).splitlines()
    assert rows[3].startswith("| sage | fp32 | ours | 2 | 180 | 0.56 | 1.80x | 2.00x | 0.500 |")
    assert rows[4].startswith("| sage | fp32 | pyg | 1 | 50 | 2.00 | 1.00x |  |")
    assert "exit status 3" in rows[6]
