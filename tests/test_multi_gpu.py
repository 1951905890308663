"""Several GPUs: two models train at once on two devices (threads), each
gives the single-device result, and no call moves the caller's current
device. Skipped where fewer than two GPUs are visible."""
import threading

import pytest
import torch
from _helpers import TOLERANCE, random_graph, relative_error

from pyg_ioaware import ops
from pyg_ioaware.nn import GCNConv

two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")


def make_model(device, in_channels):
    torch.manual_seed(0)  # process-wide: models are built before any thread starts
    return GCNConv(in_channels, 32).to(device), GCNConv(32, 8).to(device)


def train(model, device, edge_index, x, steps, results, key):
    conv1, conv2 = model
    optimizer = torch.optim.SGD(list(conv1.parameters()) + list(conv2.parameters()), lr=0.1)
    ei, xx = edge_index.to(device), x.to(device)
    losses = []
    for step in range(steps):
        batch = ei[:, step % 3::1].clone()  # a new edge_index every step
        out = conv2(conv1(xx, batch).relu(), batch)
        loss = out.square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    results[key] = (losses, conv2(conv1(xx, ei).relu(), ei).detach().cpu())


@pytest.mark.cuda
@two_gpus
def test_two_models_on_two_gpus_at_once():
    edge_index = random_graph(3000, 3000, 30000, seed=31, hub_degree=5000)
    x = torch.randn(3000, 48)
    alone = {}
    train(make_model("cuda:0", 48), "cuda:0", edge_index, x, 6, alone, "ref")
    results = {}
    models = [make_model(f"cuda:{i}", 48) for i in range(2)]
    threads = [threading.Thread(target=train,
                                args=(models[i], f"cuda:{i}", edge_index, x, 6, results, i))
               for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(results) == {0, 1}
    for i in range(2):
        losses, out = results[i]
        assert losses == pytest.approx(alone["ref"][0], rel=1e-4)
        assert relative_error(out, alone["ref"][1]) < 1e-4


@pytest.mark.cuda
@two_gpus
def test_calls_keep_the_current_device():
    edge_index = random_graph(500, 500, 4000, seed=32).to("cuda:1")
    x = torch.randn(500, 16, device="cuda:1", requires_grad=True)
    torch.cuda.set_device(0)
    out = ops.gcn_adjacency(edge_index, 500).propagate(x)
    out.sum().backward()
    torch.cuda.synchronize(1)
    assert torch.cuda.current_device() == 0
    ref = ops.gcn_adjacency(edge_index.cpu(), 500).propagate(x.detach().cpu().double())
    assert relative_error(out, ref) < TOLERANCE[torch.float32]
