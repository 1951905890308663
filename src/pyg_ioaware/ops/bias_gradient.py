"""Bias adds and linear maps whose bias gradient is a matrix-vector product.

A bias b broadcast over the rows of an [N, C] output y = ... + b gets the
gradient db = sum_n dy[n, :] = dy^T 1. torch forms it with ``dy.sum(0)``,
a column reduction that on tall fp32 gradients runs far below the bandwidth
a GEMV (cuBLAS) reaches; H200, fp32, microseconds, sum(0) against dy^T 1:
[123k, 128] 121 / 21, [169k, 128] 163 / 27, [1.6M, 128] 366 / 210,
[823k, 256] 282 / 209, [1.6M, 512] 908 / 772. In bf16 neither wins
everywhere, so 16-bit gradients keep the reduction.

:func:`column_sums` picks the faster of the two. :func:`linear` and
:func:`add_bias` are ``F.linear`` and ``x + b`` whose backward uses it
(:func:`add_product` accumulates a second product into such a result).
:func:`fused_linear` applies several maps of one input as one such product.
As autograd nodes of their own they take over only on large fp32 CUDA
outputs (:data:`MIN_GEMV_ELEMENTS`) and leave small ones, whose steps are
bound by host time, to torch's ops; where the C++ host extension is loaded
that node is C++. :func:`fused_linear` is the C++ node at every size on
2-D CUDA float32 / float64 inputs outside autocast: with the concatenation
of the maps' weights and biases inside it, it spends less host time before
the product's kernel than ``torch.cat`` and ``F.linear``.

Under CUDA autocast :func:`linear`, :func:`fused_linear` and
:func:`add_product` are the C++ node at every size (2-D inputs): it makes
autocast's casts itself and computes the same 16-bit product, and its
backward writes each gradient in its input's dtype straight from the
product (float32 dW out of the 16-bit GEMM, db summed in float32), where
autocast recorded a cast node per parameter whose backward launched one
cast kernel each; :func:`add_product` accumulates in place instead of
torch.addmm's copy of its first term. The gradients are those of the same
16-bit products, not rounded to 16 bits before their cast to float32.
"""
from types import ModuleType
from typing import Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.parameter import UninitializedTensorMixin

from .. import _native_host
from ..module_reads import parameter
from .dispatch import accumulator_dtype

#: Outputs of at least this many elements take the GEMV bias gradient
#: through a Python autograd node (about 40 us of host time an autograd
#: node, against 100+ us saved a bias at 16M elements).
MIN_GEMV_ELEMENTS = 1 << 24
#: column_sums inside a backward already running uses the GEMV from here on.
MIN_GEMV_SUM_ELEMENTS = 1 << 21


def _gemv_wins(t: Tensor, min_elements: int) -> bool:
    """Whether dy^T 1 beats dy.sum(0) on t: fp32 / fp64 CUDA, large enough."""
    return (t.is_cuda and t.dtype in (torch.float32, torch.float64)
            and t.numel() >= min_elements)


def column_sums(t: Tensor, dtype: Optional[torch.dtype] = None) -> Tensor:
    """Sum of t over every dimension but the last, in ``dtype`` (default
    t's), accumulated in fp32 (fp64 for fp64): ``t.reshape(-1, C)^T 1``
    where a GEMV is the faster (large fp32 / fp64 CUDA tensors), else
    ``t.sum``."""
    rows = t.reshape(-1, t.size(-1))
    if _gemv_wins(rows, MIN_GEMV_SUM_ELEMENTS):
        return torch.mv(rows.t(), rows.new_ones(rows.size(0))).to(dtype or t.dtype)
    return rows.sum(0, dtype=accumulator_dtype(t.dtype)).to(dtype or t.dtype)


class _AddBias(torch.autograd.Function):
    """y = x + b (b broadcast over the last dimension): dx = dy, db = column_sums(dy)."""

    @staticmethod
    def forward(ctx, x, bias):
        return x + bias

    @staticmethod
    def backward(ctx, grad_out):
        grad_bias = column_sums(grad_out) if ctx.needs_input_grad[1] else None
        return grad_out, grad_bias


class _Linear(torch.autograd.Function):
    """y = x W^T + b: dx = dy W, dW = dy^T x, db = column_sums(dy)."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x if ctx.needs_input_grad[1] else None,
                              weight if ctx.needs_input_grad[0] else None)
        return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad_out):
        x, weight = ctx.saved_tensors
        rows = grad_out.reshape(-1, grad_out.size(-1))
        grad_x = grad_out @ weight if ctx.needs_input_grad[0] else None
        grad_weight = (rows.t() @ x.reshape(-1, x.size(-1)) if ctx.needs_input_grad[1]
                       else None)
        grad_bias = column_sums(rows) if ctx.needs_input_grad[2] else None
        return grad_x, grad_weight, grad_bias


def _through_node(out_elements: int, x: Tensor) -> bool:
    """Whether an output of ``out_elements`` computed from x takes the GEMV
    bias gradient's autograd node: large fp32 CUDA outputs, outside
    autocast, that need a gradient (eager; TorchScript keeps torch's ops)."""
    return (x.is_cuda and x.dtype == torch.float32 and out_elements >= MIN_GEMV_ELEMENTS
            and torch.is_grad_enabled() and not torch.jit.is_scripting()
            and not torch.is_autocast_enabled("cuda"))


def host_linear(x: Tensor, tensors: Sequence[Tensor]
                ) -> Optional[Tuple[ModuleType, Optional[torch.dtype]]]:
    """(the host extension, the product's dtype) where the C++ node computes
    ``x`` times ``tensors`` (the maps' weights and biases), else None: a 2-D
    CUDA x, eager (not scripted or compiled), and outside autocast x and
    ``tensors`` of one float32 / float64 dtype (dtype None: theirs), under
    CUDA autocast x and ``tensors`` each float32 or autocast's dtype,
    ``tensors`` of one dtype (dtype: autocast's, as its casts would give)."""
    if (not x.is_cuda or x.dim() != 2 or torch.jit.is_scripting()
            or torch.compiler.is_compiling()):
        return None
    if torch.is_autocast_enabled("cuda"):
        dtype = torch.get_autocast_dtype("cuda")
        if (x.dtype not in (torch.float32, dtype) or len({t.dtype for t in tensors}) != 1
                or tensors[0].dtype not in (torch.float32, dtype)):
            return None
    else:
        dtype = None
        if x.dtype not in (torch.float32, torch.float64) or any(t.dtype != x.dtype
                                                                   for t in tensors):
            return None
    host = _native_host.active()
    return None if host is None else (host, dtype)


def linear(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None) -> Tensor:
    """``F.linear(x, weight, bias)``; on large fp32 CUDA outputs its bias
    gradient is :func:`column_sums` (same values, faster), through one
    autograd node (in C++ where the host extension takes the inputs); under
    CUDA autocast the C++ node wherever it takes the inputs."""
    params = (weight,) if bias is None else (weight, bias)
    if torch.is_autocast_enabled("cuda"):
        taken = host_linear(x, params)
        if taken is None:
            return F.linear(x, weight, bias)
        host, dtype = taken
        return host.fused_linear(x, [weight], list(params[1:]), dtype=dtype)
    if bias is None or not _through_node(
            x.numel() // max(x.size(-1), 1) * weight.size(0), x):
        return F.linear(x, weight, bias)
    taken = host_linear(x, params)
    if taken is not None:
        return taken[0].fused_linear(x, [weight], [bias])
    return _Linear.apply(x, weight, bias)


def apply_linear(lin: torch.nn.Module, x: Tensor) -> Tensor:
    """``lin(x)`` for a torch / PyG Linear module, through :func:`linear`
    where nothing needs the module call itself (no hooks on it, its
    parameters initialized)."""
    if not plain_linear(lin):
        return lin(x)
    return linear(x, parameter(lin, "weight"), parameter(lin, "bias"))


def plain_linear(lin: torch.nn.Module) -> bool:
    """Whether ``lin(x)`` may be computed from its parameters alone: no hooks
    on the module, ``weight`` and ``bias`` registered parameters (``bias``
    may be None; module_reads.parameter reads both) and initialized (not
    lazy). (Checked on every layer call: the registry is read without
    nn.Module.__getattr__, and the lazy check names torch's mixin, not
    UninitializedParameter, whose metaclass makes isinstance a Python call.)"""
    params = lin._parameters
    weight = params.get("weight")
    return not (weight is None or "bias" not in params or lin._forward_hooks
                or lin._forward_pre_hooks or isinstance(weight, UninitializedTensorMixin))


def fusable(lins: Sequence[torch.nn.Module]) -> bool:
    """Whether :func:`fused_linear` may stand for ``lins``' own calls: each
    :func:`plain_linear`, one output width, all with a bias or none."""
    return (all(plain_linear(lin) for lin in lins)
            and len({parameter(lin, "weight").size(0) for lin in lins}) == 1
            and len({parameter(lin, "bias") is None for lin in lins}) == 1)


def fused_linear(x: Tensor, lins: Sequence[torch.nn.Module]) -> Tensor:
    """[N, len(lins), out] with slot s = ``lins[s](x)`` for x [N, in]: one
    matrix product with the maps' weights (and biases) concatenated (in the
    C++ node, or through :func:`linear`); ``lins`` must be :func:`fusable`."""
    weights = [parameter(lin, "weight") for lin in lins]
    biases = [parameter(lin, "bias") for lin in lins]
    biases = [] if biases[0] is None else biases
    taken = host_linear(x, [*weights, *biases])
    if taken is not None:  # the concatenations (and autocast's casts) inside the C++ node
        host, dtype = taken
        out = host.fused_linear(x, weights, biases, dtype=dtype)
    else:
        out = linear(x, torch.cat(weights), torch.cat(biases) if biases else None)
    return out.view(x.size(0), len(lins), weights[0].size(0))


def add_product(y: Tensor, x: Tensor, weight: Tensor) -> Tensor:
    """``y + x W^T`` as one GEMM accumulating into ``y`` (beta = 1): in
    place where y, x and W share a dtype (no add kernel, no copy of y; y
    must be a fresh result nothing saved for backward), under CUDA autocast
    in place too (the C++ node, for a y in autocast's dtype), else
    ``torch.addmm``, which autocast casts as it casts ``F.linear``."""
    if y.dtype == x.dtype == weight.dtype:
        return y.addmm_(x, weight.t())
    taken = host_linear(x, (weight,))  # its dtype: autocast's, else None
    if taken is not None and y.dtype == taken[1]:
        return taken[0].fused_linear(x, [weight], [], into=y, dtype=taken[1])
    return torch.addmm(y, x, weight.t())


def add_bias(x: Tensor, bias: Tensor) -> Tensor:
    """``x + bias``; on large fp32 CUDA tensors the bias gradient is
    :func:`column_sums` (same values, faster)."""
    if not _through_node(x.numel(), x):
        return x + bias
    return _AddBias.apply(x, bias)
