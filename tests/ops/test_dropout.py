"""The counter-based dropout mask (ops.dropout, twin of cuda/common/dropout.cuh)."""
import pytest
import torch

from pyg_ioaware.ops.dropout import keep_mask, new_seed, philox4x32_10

M = 0xFFFFFFFF


@pytest.mark.parametrize("counter, key, expected", [
    # Random123's known answers for Philox4x32-10 (kat_vectors).
    ((0, 0, 0, 0), (0, 0), (0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)),
    ((M, M, M, M), (M, M), (0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd)),
    ((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), (0xa4093822, 0x299f31d0),
     (0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1)),
])
def test_philox_known_answers(counter, key, expected):
    words = philox4x32_10(tuple(torch.tensor([c]) for c in counter), key)
    assert [int(w) for w in words] == list(expected)


def test_keep_is_the_first_word_against_p():
    # counter 0, key 0: first word 0x6627e8d5 -> uniform 0x6627e8 / 2^24.
    uniform = 0x6627e8 / 2**24
    zero = torch.zeros(1, dtype=torch.long)
    assert keep_mask(0, zero, zero, uniform)
    assert not keep_mask(0, zero, zero, uniform + 1e-6)


def test_drop_rate_and_independence():
    edge = torch.arange(200_000).repeat_interleave(2)
    head = torch.arange(2).repeat(200_000)
    keep = keep_mask(1234, edge, head, 0.3)
    assert abs(keep.float().mean().item() - 0.7) < 0.005
    heads = keep.view(-1, 2).float()
    assert abs((heads[:, 0] * heads[:, 1]).mean().item() - 0.49) < 0.005  # heads independent
    assert not torch.equal(keep, keep_mask(1235, edge, head, 0.3))
    assert torch.equal(keep, keep_mask(1234, edge, head, 0.3))
    assert keep_mask(7, edge, head, 0.0).all()


def test_edges_above_two_to_the_32():
    edge = torch.tensor([5, 5 + 2**32])
    words = philox4x32_10((edge & M, edge >> 32, 0, 0), (9, 0))
    assert words[0][0] != words[0][1]


def test_new_seed_follows_manual_seed():
    torch.manual_seed(3)
    first = new_seed()
    torch.manual_seed(3)
    assert new_seed() == first
    assert 0 <= first < 2**63
