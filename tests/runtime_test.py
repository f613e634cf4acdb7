"""The training stacks resolve their accelerator's runtime, read from the BUILD graph,
MODULE.bazel and the locks (docs/build.md, "Runtimes"); no Bazel 7 needed.

  * //common:accelerator=tpu gives //training/tpu:sft libtpu, and //training/tpu:compile
    has it on every machine; on cpu and gpu the training targets do not;
  * the `pypi_train` hub serves train_gpu_lock.txt (CUDA torch) on
    //common:accelerator=gpu and train_lock.txt (torch+cpu) otherwise, so the GPU
    stack's torch and everything that depends on it (peft, accelerate, trl)
    follow the setting; the two locks differ only by torch's build and what the
    CUDA build adds;
  * offline, WORKSPACE's pip hubs install the same locks under the same hub
    names (third_party/offline/repositories.bzl), pypi_train with the GPU lock on
    a GPU machine.
"""

import ast
import os
import re

from absl.testing import absltest

from common import repo
from tests import build_files

_REQUIREMENTS = os.path.join("third_party", "requirements")
LIBTPU = "@pypi_train_tpu//:libtpu"
TORCH = "@pypi_train//:torch"


def pins(root, lock):
    """{normalized name: version} of a lock file."""
    with open(os.path.join(root, _REQUIREMENTS, f"{lock}_lock.txt")) as f:
        return {re.sub(r"[-_.]+", "-", m.group(1)).lower(): m.group(2)
                for m in re.finditer(r"^([A-Za-z0-9][\w.-]*)(?:\[[^\]]*\])?==(\S+)", f.read(),
                                     re.M)}


def module_tree(root):
    with open(os.path.join(root, "MODULE.bazel")) as f:
        return ast.parse(f.read())


def module_calls(root, function):
    """The keyword arguments of every `function(...)` call in MODULE.bazel."""
    return [{k.arg: k.value for k in node.keywords} for node in ast.walk(module_tree(root))
            if isinstance(node, ast.Call) and ast.unparse(node.func) == function]


class RuntimeTest(absltest.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.root = repo.source_root()
        # The graph as each value of the setting resolves it; None: every branch.
        cls.trees = {accelerator: build_files.read_tree(cls.root, accelerator)
                     for accelerator in (None, "cpu", "tpu", "gpu")}

    def reachable(self, start, accelerator):
        """Every label `start` depends on (deps, data, srcs), with select()s resolved."""
        return build_files.dependencies(self.trees[accelerator], start)

    def test_tpu_stack_gets_libtpu_on_tpu_and_the_compile_everywhere(self):
        for accelerator in ("cpu", "tpu", "gpu"):
            sft = self.reachable("//training/tpu:sft", accelerator)
            compile_ = self.reachable("//training/tpu:compile", accelerator)
            self.assertEqual(LIBTPU in sft, accelerator == "tpu", accelerator)
            self.assertIn(LIBTPU, compile_, accelerator)
        for binary in ("//training/gpu:sft", "//serving:serve", "//conversion:export"):
            self.assertNotIn(LIBTPU, self.reachable(binary, "tpu"), binary)

    def test_the_gpu_stack_gets_torch_from_the_hub_that_follows_the_setting(self):
        self.assertIn(TORCH, self.reachable("//training/gpu:sft", None))
        [train] = [call for call in module_calls(self.root, "pip.parse")
                   if call["hub_name"].value == "pypi_train"]
        by_platform = {key.value: value.value for key, value in
                       zip(train["requirements_by_platform"].keys,
                           train["requirements_by_platform"].values)}
        self.assertEqual(by_platform, {
            "//third_party/requirements:train_lock.txt": "linux_x86_64_cpu,linux_x86_64_tpu",
            "//third_party/requirements:train_gpu_lock.txt": "linux_x86_64_gpu"})
        self.assertNotIn("requirements_lock", train)  # no platform falls back to another lock
        # Each platform is Linux x86_64 with one value of //common:accelerator.
        [default] = module_calls(self.root, "pip.default")
        self.assertEqual(ast.unparse(default["platform"]), "'linux_x86_64_' + accelerator")
        self.assertIn("'//common:on_' + accelerator", ast.unparse(default["config_settings"]))
        comprehension = next(node for node in ast.walk(module_tree(self.root))
                             if isinstance(node, ast.ListComp)
                             and "pip.default" in ast.unparse(node.elt))
        self.assertEqual(ast.literal_eval(comprehension.generators[0].iter),
                         ["cpu", "tpu", "gpu"])

    def test_the_locks_differ_by_the_runtime_only(self):
        cpu, gpu, tpu = (pins(self.root, lock) for lock in ("train", "train_gpu", "train_tpu"))
        self.assertEqual(cpu["torch"], "2.13.0+cpu")
        self.assertEqual(gpu["torch"], "2.13.0")  # PyPI's Linux build: CUDA
        self.assertTrue({"nvidia-cublas", "nvidia-nccl-cu13", "triton"} <= set(gpu))
        self.assertFalse({name for name in cpu if name.startswith(("nvidia", "triton"))})
        self.assertEqual({n: v for n, v in gpu.items() if n in cpu and n != "torch"},
                         {n: v for n, v in cpu.items() if n != "torch"})
        self.assertEqual(list(tpu), ["libtpu"])
        with open(os.path.join(self.root, _REQUIREMENTS, "train_tpu.in")) as f:
            self.assertIn(f"jax[tpu]=={cpu['jax']}", f.read())  # libtpu as jax pins it

    def test_offline_the_hubs_install_what_the_online_hubs_do(self):
        with open(os.path.join(self.root, "WORKSPACE")) as f:
            workspace = ast.parse(f.read())
        offline = {}
        for node in ast.walk(workspace):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "pip_hub":
                args = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
                offline[args["name"]] = (args["lock"], args.get("gpu_lock"))
        online = {}
        for call in module_calls(self.root, "pip.parse"):
            hub = ast.literal_eval(call["hub_name"])
            if "requirements_lock" in call:
                online[hub] = (ast.literal_eval(call["requirements_lock"]), None)
            else:
                by_platform = ast.literal_eval(call["requirements_by_platform"])
                (cpu,) = [l for l, p in by_platform.items() if "linux_x86_64_cpu" in p]
                (gpu,) = [l for l, p in by_platform.items() if "linux_x86_64_gpu" in p]
                online[hub] = (cpu, gpu)
        self.assertEqual(offline, online)
        self.assertEqual(offline["pypi_train"][1],
                         "//third_party/requirements:train_gpu_lock.txt")

if __name__ == "__main__":
    absltest.main()
