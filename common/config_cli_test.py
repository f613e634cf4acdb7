import json
import os
import textwrap
from unittest import mock

from absl import flags
from absl.testing import absltest

from common import config_cli

_CONFIG_TEMPLATE = textwrap.dedent("""\
    from ml_collections import config_dict

    def get_config():
        config = config_dict.ConfigDict()
        config.name = {name!r}
        config.optimizer = config_dict.ConfigDict()
        config.optimizer.learning_rate = 1e-4
        return config
    """)


class ConfigCliTest(absltest.TestCase):

    def setUp(self):
        super().setUp()
        self.binary_dir = self.create_tempdir("binary").full_path
        self.binary = os.path.join(self.binary_dir, "sft.py")
        os.makedirs(os.path.join(self.binary_dir, "configs"))
        for name in ("cpu", "v5p8"):
            self._write(os.path.join(self.binary_dir, "configs", f"{name}.py"), name)
        self.user_dir = self.create_tempdir("user").full_path
        self.enter_context(mock.patch.dict(
            os.environ, {"BUILD_WORKING_DIRECTORY": self.user_dir}))

    def _write(self, path, name):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(_CONFIG_TEMPLATE.format(name=name))

    def _parse(self, *args):
        argv = ["sft", *args]
        values = flags.FlagValues()
        with mock.patch("sys.argv", argv):
            holder = config_cli.define_config_flag(self.binary, flag_values=values)
            values(argv)
        return holder.value

    def test_default_is_cpu_config(self):
        self.assertEqual(self._parse().name, "cpu")

    def test_bare_name_resolves_against_binary_configs(self):
        self.assertEqual(self._parse("--config=v5p8.py").name, "v5p8")

    def test_path_resolves_against_user_working_directory(self):
        self._write(os.path.join(self.user_dir, "mine", "custom.py"), "custom")
        self.assertEqual(self._parse("--config=mine/custom.py").name, "custom")

    def test_override(self):
        config = self._parse("--config=v5p8.py", "--config.optimizer.learning_rate=3e-5")
        self.assertEqual(config.optimizer.learning_rate, 3e-5)

    def test_unknown_field_is_an_error(self):
        for args in ([], ["--config=v5p8.py"]):
            with self.assertRaisesRegex(flags.Error, "did you mean 'learning_rate'"):
                self._parse(*args, "--config.optimizer.learning_rat=3e-5")

    def test_missing_config_lists_available(self):
        with self.assertRaisesRegex(flags.IllegalFlagValueError, "cpu.py, v5p8.py"):
            self._parse("--config=v5p9.py")

    def test_resolved_config_round_trip(self):
        config = self._parse("--config.optimizer.learning_rate=2e-5")
        out = self.create_tempdir("run").full_path
        path = config_cli.write_resolved_config(config, out)
        with open(path) as f:
            self.assertEqual(json.load(f)["optimizer"]["learning_rate"], 2e-5)
        self.assertEqual(config_cli.read_resolved_config(out).to_dict(), config.to_dict())

    def test_user_path(self):
        self.assertEqual(config_cli.user_path("runs/a"), os.path.join(self.user_dir, "runs/a"))
        self.assertEqual(config_cli.user_path("/abs"), "/abs")


if __name__ == "__main__":
    absltest.main()
