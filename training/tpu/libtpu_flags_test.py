"""The libtpu flags a config asks for reach LIBTPU_INIT_ARGS once, before JAX starts."""

import importlib.util
import os
import subprocess
import sys
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
from jax._src import xla_bridge
from jax._src.lib import xla_client
from ml_collections import config_dict

from common import binaries
from common import cli
from training.tpu import libtpu_flags


def config(per_chip):
    return config_dict.ConfigDict({"dropout_rng_per_chip": per_chip})


class UseTest(absltest.TestCase):

    def setUp(self):
        super().setUp()
        self.enter_context(mock.patch.dict(os.environ, {"LIBTPU_INIT_ARGS": "--xla_foo=1"}))
        self.started = self.enter_context(
            mock.patch.object(xla_bridge, "backends_are_initialized", return_value=False))
        self.loaded = self.enter_context(
            mock.patch.object(xla_client, "pjrt_plugin_loaded", return_value=False))

    def test_nothing_asked_leaves_the_environment_alone(self):
        libtpu_flags.use(config(False))
        self.assertEqual(os.environ["LIBTPU_INIT_ARGS"], "--xla_foo=1")

    def test_per_chip_masks_add_the_flag_once_after_the_users_own(self):
        libtpu_flags.use(config(True))
        libtpu_flags.use(config(True))
        self.assertEqual(os.environ["LIBTPU_INIT_ARGS"],
                         f"--xla_foo=1 {libtpu_flags.PER_CHIP_RNG}")

    def test_refused_once_jax_has_started_unless_already_given(self):
        self.started.return_value = True
        with self.assertRaisesRegex(cli.UserError, "before JAX starts"):
            libtpu_flags.use(config(True))
        self.assertEqual(os.environ["LIBTPU_INIT_ARGS"], "--xla_foo=1")
        os.environ["LIBTPU_INIT_ARGS"] = libtpu_flags.PER_CHIP_RNG
        libtpu_flags.use(config(True))  # given before the process started: nothing to do

    def test_refused_once_a_compile_only_topology_has_loaded_libtpu(self):
        self.loaded.return_value = True  # no backend started, but libtpu read its flags
        with self.assertRaisesRegex(cli.UserError, "before JAX starts"):
            libtpu_flags.use(config(True))
        self.loaded.assert_called_with("tpu")


class BinariesTest(parameterized.TestCase):
    """The binaries that start libtpu give it a config's flags before anything else:
    each logs the flag, then stops at its first check on this CPU machine (not at
    `use`'s refusal, which a call after JAX's start would meet)."""

    @parameterized.named_parameters(
        ("sft", "//training/tpu:sft", [], "machine tpu-v5p-8 needs 4 TPU chips"),
        ("compile", "//training/tpu:compile", ["--base_config=/nonexistent/g4"],
         "is neither a config.json"))
    def test_per_chip_flag_is_set_before_the_first_check(self, binary, args, error):
        tmp = self.create_tempdir().full_path
        env = binaries.child_env(LIBTPU_INIT_ARGS=None, JAX_PLATFORMS="cpu", HF_HUB_OFFLINE="1")
        done = subprocess.run(
            binaries.command(binary, "--config=v5p8.py",
             "--config.dropout_rng_per_chip=True", f"--workdir={tmp}/w", *args),
            env=env, capture_output=True, text=True, timeout=120, cwd=tmp, check=False)
        self.assertEqual(done.returncode, 1, done.stderr[-3000:])
        self.assertIn(f"LIBTPU_INIT_ARGS={libtpu_flags.PER_CHIP_RNG}\n", done.stderr)
        self.assertIn(error, done.stderr)


class CpuTestsTest(absltest.TestCase):
    """libtpu is importable in this test's processes (a dependency, as it is of every
    test of //training/tpu:aot); .bazelrc pins JAX to the CPU in every test process,
    so none starts libtpu looking for chips (on a host without them JAX can abort)."""

    def test_jax_starts_on_the_cpu_without_touching_libtpu(self):
        self.assertIsNotNone(importlib.util.find_spec("libtpu"))
        self.assertEqual(os.environ.get("JAX_PLATFORMS"), "cpu")
        done = subprocess.run(
            [sys.executable, "-c", "import jax; print(jax.default_backend(), len(jax.devices()))"],
            env=binaries.this_interpreter_env(), capture_output=True, text=True, timeout=120,
            check=False)
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        self.assertEqual(done.stdout.split()[0], "cpu")
        self.assertNotIn("TPU", done.stderr)
        self.assertNotIn("libtpu", done.stderr)


if __name__ == "__main__":
    absltest.main()
