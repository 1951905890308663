"""Helpers shared by the tests: random graphs with the shapes that break
kernels, error measures and tolerances."""
import os

import pytest
import torch

CUDA = torch.cuda.is_available()
requires_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")

# Norm-relative error allowed against a float64 reference, per dtype.
TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-5, torch.float16: 5e-3,
             torch.bfloat16: 3e-2}


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64 (0 for two empty tensors)."""
    out, ref = out.double().cpu(), ref.double().cpu()
    assert out.shape == ref.shape, (out.shape, ref.shape)
    assert torch.isfinite(out).all(), "non-finite values in the output"
    if ref.numel() == 0:
        return 0.0
    return ((out - ref).norm() / ref.norm().clamp(min=1e-30)).item()


def random_graph(num_src: int, num_dst: int, num_edges: int, seed: int,
                 hub_degree: int = 0) -> torch.Tensor:
    """edge_index [2, E] (int64, CPU) with heavy-tailed in-degrees (Zipf over
    a random node order), ~20% of destinations with no incoming edge, a few
    self loops (some doubled, square graphs only), duplicate edges, and
    optionally one hub with ``hub_degree`` extra incoming edges."""
    gen = torch.Generator().manual_seed(seed)
    reachable = max(1, int(num_dst * 0.8))
    order = torch.randperm(num_dst, generator=gen)[:reachable]
    zipf = 1.0 / torch.arange(1, reachable + 1, dtype=torch.float64) ** 1.1
    dst = order[torch.multinomial(zipf, num_edges, replacement=True, generator=gen)]
    src = torch.randint(0, num_src, (num_edges,), generator=gen)
    parts = [torch.stack([src, dst])]
    if num_edges > 0:
        parts.append(parts[0][:, : max(1, num_edges // 10)])  # duplicates
    if num_src == num_dst and num_dst > 0:
        loops = order[: max(1, reachable // 10)]
        parts.append(torch.stack([loops, loops]))
        parts.append(torch.stack([loops[:2], loops[:2]]))  # doubled loops
    if hub_degree > 0:
        hub = order[-1]
        parts.append(torch.stack([torch.randint(0, num_src, (hub_degree,), generator=gen),
                                  hub.repeat(hub_degree)]))
    edge_index = torch.cat(parts, dim=1)
    return edge_index[:, torch.randperm(edge_index.size(1), generator=gen)]


def hubs_graph(num_src: int, num_dst: int, num_edges: int, seed: int, dst_hubs, src_hubs,
               gen: torch.Generator) -> torch.Tensor:
    """edge_index of random_graph(num_src, num_dst, num_edges, seed) with,
    for each (node, degree) of ``dst_hubs``, degree more edges into node
    from random sources and, for each of ``src_hubs``, degree more edges out
    of node to random destinations (drawn from ``gen``)."""
    into = torch.cat([torch.full((d,), h) for h, d in dst_hubs])
    out_of = torch.cat([torch.full((d,), h) for h, d in src_hubs])
    return torch.cat([random_graph(num_src, num_dst, num_edges, seed=seed),
                      torch.stack([torch.randint(0, num_src, into.shape, generator=gen), into]),
                      torch.stack([out_of, torch.randint(0, num_dst, out_of.shape,
                                                         generator=gen)])], dim=1)


def cap_hub_lists(monkeypatch, module, max_hubs: int) -> list:
    """Makes ``module``'s hub_degree give hub lists of at most ``max_hubs``
    slots, so the kernels meet full lists (and do the refused rows
    themselves). Returns the (slots asked, slots given) of every call, for
    the test to check that a list was cut."""
    real, calls = module.hub_degree, []

    def capped(*args, **kwargs):
        degree, slots = real(*args, **kwargs)
        calls.append((slots, min(slots, max_hubs)))
        return degree, calls[-1][1]

    monkeypatch.setattr(module, "hub_degree", capped)
    return calls


def many_hubs_graph(seed: int):
    """(edge_index [2, E], nodes) of a square graph whose hub rows, in the
    CSR and in its CSR^T, hold 40 chunks of 256 entries per SM of CUDA
    device 0 on each side: more than the attention kernels give whole
    blocks (they hand each chunk to a warp there; the small hub tests take
    the block form)."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    num_hubs, degree, nodes = 5 * sms // 2, 4096, 200_000
    gen = torch.Generator().manual_seed(seed)
    hubs = torch.randperm(nodes, generator=gen)[:2 * num_hubs]
    dst_hubs = hubs[:num_hubs].repeat_interleave(degree)
    src_hubs = hubs[num_hubs:].repeat_interleave(degree)
    into_hubs = torch.stack([torch.randint(0, nodes, dst_hubs.shape, generator=gen), dst_hubs])
    out_of_hubs = torch.stack([src_hubs, torch.randint(0, nodes, src_hubs.shape, generator=gen)])
    edge_index = torch.cat([random_graph(nodes, nodes, 50_000, seed=seed), into_hubs,
                            out_of_hubs], dim=1)
    return edge_index, nodes


def native_required() -> bool:
    """On GPU hosts gpu_check.sh sets this, so a missing native library
    fails the CUDA tests instead of silently falling back to plain torch."""
    return os.environ.get("PYG_IOAWARE_REQUIRE_NATIVE") == "1"


# ------------------------------------------------------ property-test graphs
# (name, num_src, num_dst, num_edges, hub_degree): empty, edgeless, isolated
# nodes, hubs far above a block, duplicates and self loops (random_graph adds
# both), bipartite both ways, a single node.
PROPERTY_GRAPHS = [
    ("empty", 0, 0, 0, 0),
    ("no-edges", 7, 7, 0, 0),
    ("single-node", 1, 1, 3, 0),
    ("small-square", 23, 23, 90, 0),
    ("hub-square", 150, 150, 600, 1500),
    ("bipartite-wide", 90, 17, 300, 200),
    ("bipartite-tall", 11, 80, 250, 0),
    ("dense", 12, 12, 600, 0),
]
PROPERTY_WIDTHS = [1, 3, 17, 64, 130]


def property_case(name: str, seed: int):
    """(edge_index int64 CPU, num_src, num_dst) of a named property graph,
    reproducible from ``seed`` (a fixed integer, never hash())."""
    _, num_src, num_dst, num_edges, hub = next(g for g in PROPERTY_GRAPHS if g[0] == name)
    if num_edges == 0 or num_src == 0:
        return torch.empty(2, 0, dtype=torch.long), num_src, num_dst
    return random_graph(num_src, num_dst, num_edges, seed, hub_degree=hub), num_src, num_dst


def cuda_kernel_names(run):
    """(the names of the CUDA kernels that ``run()`` launched, what it
    returned), from torch.profiler (whose CUDA events compute-sanitizer
    hides: not for tests run under it)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        result = run()
        torch.cuda.synchronize()
    return [event.name for event in prof.events()], result


def seed_of(*parts) -> int:
    """A reproducible seed from test parameters."""
    import zlib
    return zlib.crc32("-".join(str(p) for p in parts).encode()) % 100_000


def spy_on_paths(monkeypatch, layer_class) -> list:
    """The path each call of ``layer_class`` takes from now on, in order:
    'fused' or 'pyg' (its fused_forward and pyg_forward wrapped, and a
    layer's ``_plain_cuda_forward``, the fused path's entry for its most
    common call, where it took the call)."""
    taken = []
    fused, pyg = layer_class.fused_forward, layer_class.pyg_forward
    plain = getattr(layer_class, "_plain_cuda_forward", None)

    def spy_fused(self, *args, **kwargs):
        taken.append("fused")
        return fused(self, *args, **kwargs)

    def spy_pyg(self, *args, **kwargs):
        taken.append("pyg")
        return pyg(self, *args, **kwargs)

    def spy_plain(self, *args, **kwargs):
        out = plain(self, *args, **kwargs)
        if out is not None:
            taken.append("fused")
        return out

    monkeypatch.setattr(layer_class, "fused_forward", spy_fused)
    monkeypatch.setattr(layer_class, "pyg_forward", spy_pyg)
    if plain is not None:
        monkeypatch.setattr(layer_class, "_plain_cuda_forward", spy_plain)
    return taken


def spy_on_general_checks(monkeypatch, layer_class) -> list:
    """The arguments of every ``layer_class`` call that goes through its
    ``fused_forward`` (the general checks) from now on, in order: a
    layer's ``_plain_cuda_forward`` takes its most common call without
    them."""
    calls = []
    fused_forward = layer_class.fused_forward
    monkeypatch.setattr(layer_class, "fused_forward",
                        lambda self, *args: calls.append(args) or fused_forward(self, *args))
    return calls


# ------------------------------------------------- attention layers vs PyG
def run_attention(conv, x, edge_index, edge_attr=None, weights=True):
    """One call of an attention layer (ours or PyG's) on fresh leaf copies of
    ``x`` (a tensor or a pair) and a fixed backward: (output, (edge_index,
    alpha) or None, grads of the node features, grads of every parameter by
    name)."""
    xs = tuple(t.detach().clone().requires_grad_() for t in (x if isinstance(x, tuple) else (x,)))
    inp = xs if isinstance(x, tuple) else xs[0]
    conv.zero_grad()
    out = conv(inp, edge_index, edge_attr, return_attention_weights=True if weights else None)
    y, att = (out[0], out[1]) if weights else (out, None)
    y.backward(torch.linspace(-1, 1, y.numel(), dtype=y.dtype, device=y.device).view_as(y))
    grads = {n: p.grad for n, p in conv.named_parameters() if p.grad is not None}
    return y, att, [t.grad for t in xs], grads


def assert_runs_match(ours, ref, tol, zero_grads=()):
    """Two run_attention results agree: outputs, attention weights (the same
    edge_index), input and parameter gradients (the same parameters). The
    parameters named in ``zero_grads`` have an exact gradient of 0 (a bias
    the softmax cancels): both sides' must be rounding noise."""
    assert relative_error(ours[0], ref[0]) < tol
    if ours[1] is not None:
        assert torch.equal(ours[1][0].cpu(), ref[1][0].cpu())
        assert relative_error(ours[1][1], ref[1][1]) < tol
    for got, want in zip(ours[2], ref[2]):
        assert relative_error(got, want) < tol
    assert ours[3].keys() == ref[3].keys()
    scale = max(ours[0].detach().double().norm().item(), 1.0)
    for name in ref[3]:
        if name in zero_grads:
            for grad in (ours[3][name], ref[3][name]):
                assert grad.double().norm() < tol * scale, name
        else:
            assert relative_error(ours[3][name], ref[3][name]) < tol, name


def assert_compiled_matches_eager(forward, x, modules, zero_grads=()):
    """``torch.compile(forward)(x)`` agrees with ``forward(x)``: the output
    (1e-5) and the gradients of x and of every parameter of ``modules``
    (1e-4) under the loss sum(out^2). Parameters whose name ends with one of
    ``zero_grads`` have an exact gradient of 0 (a bias the softmax cancels):
    both sides' must be rounding noise (< 1e-5)."""
    named = [("x", x)] + [(f"{i}.{n}", p) for i, module in enumerate(modules)
                          for n, p in module.named_parameters()]
    params = [p for _, p in named]
    expected = forward(x)
    expected_grads = torch.autograd.grad(expected.square().sum(), params)
    got = torch.compile(forward)(x)
    grads = torch.autograd.grad(got.square().sum(), params)
    assert relative_error(got, expected) < 1e-5
    for (name, _), got_grad, want in zip(named, grads, expected_grads):
        if name.endswith(tuple(zero_grads)):
            assert got_grad.abs().max() < 1e-5 and want.abs().max() < 1e-5, name
        else:
            assert relative_error(got_grad, want) < 1e-4, name


def assert_reference_under_autograd(op, inputs, grad, out, lse, grads, function_name):
    """``op(*leaves)`` -> (out, lse), on clones of ``inputs`` that record a
    gradient, runs through torch's autograd (no ``function_name`` node, lse
    not differentiable) and gives the custom Function's ``out``, ``lse`` and
    ``grads`` (float64 inputs); without a gradient, the same out."""
    leaves = [t.clone().requires_grad_() for t in inputs]
    got, got_lse = op(*leaves)
    assert function_name not in type(got.grad_fn).__name__ and got_lse.grad_fn is None
    got.backward(grad)
    assert relative_error(got, out) < 1e-12 and torch.equal(got_lse, lse)
    for leaf, want in zip(leaves, grads):
        assert relative_error(leaf.grad, want) < 1e-10
    with torch.no_grad():
        plain, _ = op(*leaves)
    assert torch.equal(plain, got.detach())


def count_syncs(fn):
    """Host synchronisations while ``fn`` runs (CUDA): those torch reports,
    and waits for a CUDA event (graph.prefetch reads a new graph's index
    statistics that way)."""
    import warnings
    event_waits = []
    wait_for_event = torch.cuda.Event.synchronize

    def counted(event):
        event_waits.append(event)
        return wait_for_event(event)

    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    torch.cuda.Event.synchronize = counted
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fn()
    finally:
        torch.cuda.Event.synchronize = wait_for_event
        torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught) + len(event_waits)


def host_extension_calls(monkeypatch, names) -> dict:
    """Counts of calls of the host extension's functions ``names`` (each
    wrapped for the test); skips where the extension is not built for this
    torch, and fails where $PYG_IOAWARE_HOST_LIB names one that does not
    load."""
    from pyg_ioaware import _native_host
    if os.environ.get(_native_host.ENV_MODULE_PATH):
        assert _native_host.extension() is not None
    module = _native_host.extension()
    if module is None:
        pytest.skip("the C++ host extension is not built for this torch")
    count = dict.fromkeys(names, 0)
    for name in names:
        function = getattr(module, name)

        def counted(*args, _name=name, _function=function, **kwargs):
            count[_name] += 1
            return _function(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)
    return count
