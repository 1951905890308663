"""The package's top level shows only its public names."""
import pyg_ioaware


def test_dir_is_all():
    assert dir(pyg_ioaware) == sorted(pyg_ioaware.__all__)
    assert "torch" not in dir(pyg_ioaware) and "_native" not in dir(pyg_ioaware)


def test_every_public_name_exists():
    for name in pyg_ioaware.__all__:
        assert getattr(pyg_ioaware, name) is not None, name
    for module in (pyg_ioaware.nn, pyg_ioaware.ops, pyg_ioaware.loader):
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name}"
