"""The plain-torch neighbor sampler: every sampled edge is an edge of the
graph, seed nodes come first, fanouts are respected, and the loader picks
PyG's sampler only where it can sample."""
import pytest
import torch
from _helpers import count_syncs
from torch_geometric.data import Data

from pyg_ioaware.loader import NeighborSampler, neighbor_loader, pyg_sampler_available


def make_graph(num_nodes=200, num_edges=1500, seed=0):
    gen = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(num_nodes, (2, num_edges), generator=gen)
    edge_index[1, :300] = 7  # one heavy destination
    return Data(x=torch.randn(num_nodes, 5, generator=gen), y=torch.arange(num_nodes),
                edge_index=edge_index, train_mask=torch.arange(num_nodes) % 3 == 0)


def test_batches_are_subgraphs_with_seeds_first():
    data = make_graph()
    sampler = NeighborSampler(data, [4, 3], batch_size=16, input_nodes=data.train_mask,
                              generator=torch.Generator().manual_seed(1))
    edges = set(map(tuple, data.edge_index.t().tolist()))
    in_degree = torch.bincount(data.edge_index[1], minlength=data.num_nodes)
    seen = []
    for batch in sampler:
        n_id, ei = batch.n_id, batch.edge_index
        assert n_id.unique().numel() == n_id.numel()
        assert torch.equal(batch.y, data.y[n_id]) and torch.equal(batch.x, data.x[n_id])
        assert bool(data.train_mask[n_id[:batch.batch_size]].all())
        assert sum(batch.num_sampled_nodes) == n_id.numel()
        assert sum(batch.num_sampled_edges) == ei.size(1)
        for u, v in zip(n_id[ei[0]].tolist(), n_id[ei[1]].tolist()):
            assert (u, v) in edges
        # Hop 1: every seed gets min(4, in-degree) edges.
        hop1 = ei[:, :batch.num_sampled_edges[0]]
        per_seed = torch.bincount(hop1[1], minlength=batch.batch_size)
        assert torch.equal(per_seed, in_degree[n_id[:batch.batch_size]].clamp(max=4))
        seen.append(n_id[:batch.batch_size])
    assert len(seen) == len(sampler)
    assert torch.equal(torch.cat(seen).sort().values, data.train_mask.nonzero().view(-1))


def test_all_neighbors_and_reproducible():
    data = make_graph(seed=2)
    full = NeighborSampler(data, [-1], batch_size=50, shuffle=False).sample(torch.tensor([7]))
    assert full.edge_index.size(1) == int((data.edge_index[1] == 7).sum())

    def first(seed):
        loader = neighbor_loader(data, [5, 5], 32, sampler="torch",
                                 generator=torch.Generator().manual_seed(seed))
        return next(iter(loader))
    a, b = first(3), first(3)
    assert torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_index, b.edge_index)


def test_loader_choice_and_errors():
    data = make_graph()
    loader = neighbor_loader(data, [2], 8)
    assert isinstance(loader, NeighborSampler) != pyg_sampler_available()
    if not pyg_sampler_available():
        with pytest.raises(ImportError, match="pyg-lib or torch-sparse"):
            neighbor_loader(data, [2], 8, sampler="pyg")
    with pytest.raises(ValueError, match="sampler"):
        neighbor_loader(data, [2], 8, sampler="fast")
    with pytest.raises(ValueError, match="batch_size"):
        NeighborSampler(data, [2], 0)


def test_with_input_nodes_shares_the_csr():
    data = make_graph(seed=4)
    sampler = NeighborSampler(data, [3], batch_size=10)
    other = sampler.with_input_nodes(torch.tensor([5, 6, 7]), shuffle=False)
    assert other.sources is sampler.sources and other.rowptr is sampler.rowptr
    assert torch.equal(next(iter(other)).n_id[:3], torch.tensor([5, 6, 7]))
    assert sampler.input_nodes.numel() == data.num_nodes and sampler.shuffle


@pytest.mark.cuda
def test_samples_on_the_gpu_like_on_the_cpu():
    """The same seeds and all neighbours (no randomness) give the same batch
    on the GPU as on the CPU; random fanouts stay within the graph."""
    data = make_graph(seed=5)
    seeds = torch.tensor([7, 3, 11])
    cpu = NeighborSampler(data, [-1, -1], 4).sample(seeds)
    gpu = NeighborSampler(data, [-1, -1], 4, device="cuda").sample(seeds)
    assert gpu.edge_index.is_cuda and gpu.x.device == data.x.device
    assert torch.equal(cpu.n_id, gpu.n_id.cpu())
    assert torch.equal(cpu.edge_index, gpu.edge_index.cpu())
    loader = neighbor_loader(data, [4, 2], 16, device="cuda",
                             generator=torch.Generator("cuda").manual_seed(0))
    edges = set(map(tuple, data.edge_index.t().tolist()))
    for batch in loader:
        n_id = batch.n_id.cpu()
        ei = batch.edge_index.cpu()
        assert all((u, v) in edges for u, v in zip(n_id[ei[0]].tolist(), n_id[ei[1]].tolist()))
    with pytest.raises(ValueError, match="generator"):
        NeighborSampler(data, [2], 4, device="cuda", generator=torch.Generator())


def test_pyg_sampler_is_cpu_only():
    with pytest.raises(ValueError, match="samples on the CPU"):
        neighbor_loader(make_graph(), [2], 8, sampler="pyg", device="cuda")


@pytest.mark.cuda
def test_gpu_sampling_reads_back_two_sizes_per_hop():
    """A hop on the GPU waits for the host twice: the candidate and kept
    edge counts (read together), then the new nodes. Node attributes on the
    CPU add one copy of n_id, whatever their number."""
    data = make_graph(seed=6)
    seeds = torch.tensor([7, 3, 11], device="cuda")
    for attributes_on, copies in (("cuda", 0), ("cpu", 1)):
        placed = data.clone().to(attributes_on, "x", "y", "train_mask")
        sampler = NeighborSampler(placed, [4, 2, -1], 16, device="cuda",
                                  generator=torch.Generator("cuda").manual_seed(0))
        sampler.sample(seeds)  # warm-up
        assert count_syncs(lambda: sampler.sample(seeds)) == 2 * 3 + copies
