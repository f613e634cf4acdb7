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

    def test_platform_of_every_machine(self):
        self.assertEqual({name: m.platform for name, m in machines.MACHINES.items()}, {
            "cpu": "cpu", "tpu-v5p-8": "tpu", "tpu-v5p-16": "tpu", "tpu-v6e-8": "tpu",
            "gpu-h100x2": "gpu", "gpu-h200": "gpu"})

    def test_a_config_for_an_accelerator_the_process_lacks_is_refused(self):
        v5p8 = machines.get("tpu-v5p-8")
        with self.assertRaisesRegex(machines.WrongMachine,
                                    r"^the config's machine tpu-v5p-8 needs 4 TPU chips; this "
                                    r"process sees 1 CPU\. Run it on a TPU VM\.$"):
            machines.check_visible(v5p8, "cpu", 1, hint="Run it on a TPU VM.")
        with self.assertRaisesRegex(machines.WrongMachine, "needs 2 GPUs; this process sees "
                                    "1 GPU$"):
            machines.check_visible(machines.get("gpu-h100x2"), "gpu", 1)
        with self.assertRaisesRegex(machines.WrongMachine, "sees 4 TPU chips"):
            machines.check_visible(machines.get("tpu-v5p-16"), "tpu", 4)
        machines.check_visible(v5p8, "tpu", 4)
        machines.check_visible(machines.get("tpu-v5p-16"), "tpu", 8)
        machines.check_visible(machines.get("gpu-h100x2"), "gpu", 1, needed=1)
        machines.check_visible(machines.get("cpu"), "tpu", 4)  # CPU configs run anywhere

    def test_unknown_machine_is_a_user_error(self):
        with self.assertRaisesRegex(cli.UserError, "unknown machine 'tpu-v9'; known: cpu, "):
            machines.get("tpu-v9")


if __name__ == "__main__":
    absltest.main()
