"""A module's registered submodules and parameters, read without
``nn.Module.__getattr__``.

``conv.lin`` or ``lin.weight`` finds nothing by the normal lookup (torch
keeps them in the module's ``_modules`` and ``_parameters``), raises an
AttributeError inside the interpreter and then calls
``nn.Module.__getattr__``: 1.2-1.6 us a read on the build machine against
0.12-0.16 us for these functions, and a layer call on a small mini-batch
(a step bound by host time) reads a dozen. ``nn.Module.__setattr__``,
``register_parameter`` and ``_apply`` keep both registries current, so the
result is ``getattr(module, name)``'s for a registered name; a name that is
not registered raises KeyError.
"""
from typing import Optional

from torch import Tensor, nn


def submodule(module: nn.Module, name: str) -> nn.Module:
    """``module.<name>`` for a registered submodule."""
    return module._modules[name]


def parameter(module: nn.Module, name: str) -> Optional[Tensor]:
    """``module.<name>`` for a registered parameter (None where registered
    as None, e.g. a layer built with ``bias=False``)."""
    return module._parameters[name]
