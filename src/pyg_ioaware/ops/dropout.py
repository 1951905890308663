"""Counter-based dropout masks: the keep/drop decision for an (edge, head)
entry is a pure function of (seed, edge, head), so the backward pass
regenerates the forward's mask and nothing is stored.

keep(seed, e, h) = uniform(Philox4x32-10(counter=(e low, e high, h, 0),
key=(seed low, seed high))[0]) >= p, with uniform(u) = (u >> 8) * 2^-24 and
e the entry's position in the CSR (destination-major) order. This is the
plain-torch twin of cuda/common/dropout.cuh (the CPU path and the tests'
oracle): both give the same mask bit for bit.
"""
import torch
from torch import Tensor

__all__ = ["keep_mask", "new_seed", "philox4x32_10"]

_MASK32 = 0xFFFFFFFF
_MUL = (0xD2511F53, 0xCD9E8D57)
_WEYL = (0x9E3779B9, 0xBB67AE85)


def _mulhilo(a: int, b: Tensor):
    """(high, low) 32-bit halves of a * b for b < 2^32 (int64 arithmetic:
    the product wraps modulo 2^64, which keeps both halves exact)."""
    product = b * a
    return (product >> 32) & _MASK32, product & _MASK32


def philox4x32_10(counter, key):
    """The four output words of Philox4x32-10 for ``counter`` (four int64
    tensors holding 32-bit words, broadcast together) under ``key`` (two
    32-bit ints)."""
    c0, c1, c2, c3 = torch.broadcast_tensors(*(torch.as_tensor(c, dtype=torch.int64)
                                               for c in counter))
    k0, k1 = key
    for _ in range(10):
        hi0, lo0 = _mulhilo(_MUL[0], c0)
        hi1, lo1 = _mulhilo(_MUL[1], c2)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        k0, k1 = (k0 + _WEYL[0]) & _MASK32, (k1 + _WEYL[1]) & _MASK32
    return c0, c1, c2, c3


def keep_mask(seed: int, edge: Tensor, head: Tensor, p: float) -> Tensor:
    """Bool tensor: whether entry (edge, head) survives dropout with drop
    probability ``p`` under ``seed``; ``edge`` and ``head`` broadcast
    (int64 CSR positions and head indices)."""
    edge, head = torch.broadcast_tensors(edge.long(), head.long())
    words = philox4x32_10((edge & _MASK32, (edge >> 32) & _MASK32, head & _MASK32, 0),
                          (seed & _MASK32, (seed >> 32) & _MASK32))
    uniform = (words[0] >> 8).to(torch.float32) * (1.0 / 16777216.0)
    return uniform >= p


def new_seed() -> int:
    """A 63-bit seed from torch's default (CPU) generator: reproducible
    under torch.manual_seed, and no device synchronisation."""
    return int(torch.randint(0, 2**63 - 1, (), dtype=torch.int64))
