"""A stand-in for torchvision in the SGLang test environments (.ci/install_sglang.sh), loaded at start-up by a
``.pth`` line, for one reason: every SGLang module imports ``sglang.srt.utils.common``, which does
``from torchvision.io import decode_jpeg`` at module level, and no torchvision can load next to this machine's
CPU torch (PyPI's builds link libtorch_cuda; the CPU builds' index is out of reach). transformers, which SGLang
imports too, probes for torchvision and then imports a few of its names at module level.

So: a finder at the END of ``sys.meta_path`` (a real torchvision, when there is one, is found first) that
answers ``torchvision`` and its submodules with modules in which every name is a placeholder class: it can be
imported, subclassed and have attributes read; calling it raises. Nothing the tests run calls torchvision.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any, NoReturn

PACKAGE = "torchvision"


class _Placeholder(type):
    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder(name, (), {"__module__": cls.__module__})

    def __call__(cls, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError(f"{cls.__module__}.{cls.__name__}: torchvision is a stand-in here")


class _Module(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder(name, (), {"__module__": self.__name__})


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != PACKAGE and not fullname.startswith(PACKAGE + "."):
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _Module(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        if module.__name__ == PACKAGE:
            module.__version__ = "0.0.0+standin"


def install() -> None:
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.append(_Finder())


install()
