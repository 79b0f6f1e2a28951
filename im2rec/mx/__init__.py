"""``import im2rec.mx as mx``: MXNet 1.9.1's data-loading API on numpy, for MXNet-era recipes.

Change ``import mxnet as mx`` to ``import im2rec.mx as mx`` (and ``from mxnet[.sub] import x``
to ``from im2rec.mx[.sub] import x``) and a data pipeline runs as under MXNet, giving MXNet's
values. What it covers:

* ``mx.io``: ``DataIter``, ``DataBatch``, ``DataDesc``, ``NDArrayIter``, ``PrefetchingIter``,
  ``ResizeIter``, ``ImageRecordIter``, ``ImageDetRecordIter`` (batch for batch MXNet's);
* ``mx.nd`` / ``mx.ndarray``: ``NDArray`` (a numpy array with MXNet's methods and results)
  and the functions pipelines call;
* ``mx.image`` / ``mx.img``: decoding, resizing, crops, the augmenters, ``ImageIter``, and
  the detection ones (``CreateDetAugmenter``, ``ImageDetIter``), drawing as MXNet's Python does;
* ``mx.recordio``, ``mx.Context``, ``mx.cpu``, ``mx.gpu`` (accepted; arrays stay on the CPU),
  ``mx.random.seed``.

What it leaves out (symbols, Gluon, modules, optimisers, autograd, kvstore: training) raises
an ``AttributeError`` naming what to use instead: train with PyTorch or JAX on the batches
(``torch.from_numpy(batch.data[0])`` shares the memory).
"""

from __future__ import annotations

import importlib.abc
import sys
from typing import Any

from . import image, io, nd, random, recordio
from .context import Context, cpu, cpu_pinned, current_context, gpu, num_gpus
from .nd import NDArray

ndarray = nd
img = image
sys.modules[f"{__name__}.ndarray"] = nd
sys.modules[f"{__name__}.img"] = image

__version__ = "1.9.1"  # the MXNet whose data API this is

__all__ = ["Context", "NDArray", "cpu", "cpu_pinned", "current_context", "gpu", "image", "img", "io", "nd", "ndarray", "num_gpus", "random", "recordio"]

#: MXNet's training side: not here, and what to use instead.
_OUT_OF_SCOPE = {
    "sym": "PyTorch modules (torch.nn)",
    "symbol": "PyTorch modules (torch.nn)",
    "gluon": "PyTorch (torch.nn, torch.utils.data; im2rec.RecordLoader for .rec files)",
    "mod": "a PyTorch training loop",
    "module": "a PyTorch training loop",
    "model": "a PyTorch training loop (torch.save for checkpoints)",
    "optimizer": "torch.optim",
    "lr_scheduler": "torch.optim.lr_scheduler",
    "autograd": "torch.autograd",
    "kv": "torch.distributed",
    "kvstore": "torch.distributed",
    "metric": "torchmetrics",
    "initializer": "torch.nn.init",
    "init": "torch.nn.init",
    "callback": "a PyTorch training loop",
    "np": "numpy",
    "npx": "numpy and PyTorch",
    "contrib": "PyTorch's or torchvision's operators",
    "test_utils": "numpy.testing",
    "profiler": "torch.profiler",
    "visualization": "torchinfo or torchviz",
    "viz": "torchinfo or torchviz",
    "rnn": "torch.nn.RNN",
    "operator": "torch.autograd.Function",
    "executor": "a PyTorch training loop",
    "monitor": "PyTorch hooks",
    "engine": "nothing: numpy computes eagerly",
    "runtime": "nothing: im2rec.mx has no build features",
    "util": "numpy",
}


def _refusal(name: str) -> str:
    instead = _OUT_OF_SCOPE.get(name, "PyTorch or JAX")
    return f"mx.{name} is not in im2rec.mx, which covers MXNet's data pipeline (mx.io, mx.nd, mx.image, mx.recordio): use {instead} instead"


class _Refuse(importlib.abc.MetaPathFinder):
    """``import im2rec.mx.gluon`` and ``from im2rec.mx import gluon``: an ImportError in our words."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> None:
        package, _, name = fullname.rpartition(".")
        if package == __name__ and name in _OUT_OF_SCOPE:
            raise ImportError(_refusal(name), name=fullname)


if not any(type(f).__name__ == "_Refuse" for f in sys.meta_path):
    sys.meta_path.append(_Refuse())


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(_refusal(name))
