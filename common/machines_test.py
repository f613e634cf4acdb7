from absl.testing import absltest

from common import cli
from common import machines


class MachinesTest(absltest.TestCase):

    def test_reference_prices_and_chips(self):
        # training/common/recipe.md: the hourly prices the reference compared.
        prices = {name: machines.get(name).dollars_per_hour
                  for name in ("tpu-v5p-8", "gpu-h100x2", "tpu-v6e-8")}
        self.assertEqual(prices, {"tpu-v5p-8": 16.80, "gpu-h100x2": 22.12, "tpu-v6e-8": 21.52})
        self.assertEqual(machines.get("tpu-v5p-16").dollars_per_hour, 2 * 16.80)
        self.assertEqual([machines.get(n).chips for n in ("tpu-v5p-8", "tpu-v5p-16", "tpu-v6e-8",
                                                          "gpu-h100x2")], [4, 8, 8, 2])
        self.assertEqual(machines.get("tpu-v5p-8").peak_flops_per_chip, 459e12)

    def test_every_machine_says_where_its_figures_come_from(self):
        for machine in machines.MACHINES.values():
            self.assertTrue(machine.source, machine.name)

    def test_unknown_machine_is_a_user_error(self):
        with self.assertRaisesRegex(cli.UserError, "unknown machine 'tpu-v9'; known: cpu, "):
            machines.get("tpu-v9")


if __name__ == "__main__":
    absltest.main()
