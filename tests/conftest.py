"""Test hooks: the CUDA marker skips where no GPU is visible; caches are
cleared after every test."""
import pytest
import torch

import pyg_ioaware


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "cuda" in item.keywords and not torch.cuda.is_available():
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU"))


@pytest.fixture(autouse=True)
def _fresh_caches():
    yield
    pyg_ioaware.clear_graph_cache()
