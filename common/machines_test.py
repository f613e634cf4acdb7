import json

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

    def test_the_studys_two_costs_from_the_table(self):
        # training/common/recipe.md: v5p-8 for 3.34 h, 2 x H100 for 5.39 h.
        self.assertEqual(round(machines.get("tpu-v5p-8").dollars_per_hour * 3.34, 2), 56.11)
        self.assertEqual(round(machines.get("gpu-h100x2").dollars_per_hour * 5.39, 2), 119.23)

    def test_every_machine_is_priced_with_its_source_and_date(self):
        for name, machine in machines.MACHINES.items():
            with self.subTest(name):
                price = machine.price
                self.assertIsNotNone(price.on_demand)
                self.assertRegex(price.date, r"^20\d\d-\d\d-\d\d$")
                self.assertTrue(price.source)
                self.assertEqual(price.region, machines.PRICE_REGION)
                if machine.platform != "cpu" and price.spot is None:
                    # Spot where it is sold: B200 has none in us-central1, and says so.
                    self.assertEqual(machine.family, "gpu-b200")
                    self.assertIn("no spot price", price.spot_note)
        self.assertIn("lower bound", machines.get("gpu-b200x8").price.note)
        self.assertIn("low confidence", machines.get("gpu-h200x8").price.note)

    def test_another_region_prices_tpus_from_its_own_figures(self):
        europe = machines.priced("europe-west4")
        self.assertAlmostEqual(europe["tpu-v5p-8"].dollars_per_hour, 4 * 4.2525)
        self.assertAlmostEqual(europe["tpu-v6e-8"].spot_dollars_per_hour, 8 * 0.71316)
        # No GPU figure for that region: none, never us-central1's.
        self.assertIsNone(europe["gpu-h100x2"].dollars_per_hour)
        self.assertIn("--prices", europe["gpu-h100x2"].price.source)
        self.assertIsNone(machines.priced("us-west4")["tpu-v5p-8"].dollars_per_hour)
        nowhere = machines.priced("asia-east1")
        self.assertEqual({m.dollars_per_hour for m in nowhere.values()}, {None, 0.0})
        self.assertEqual(nowhere["cpu"].dollars_per_hour, 0.0)

    def _price_file(self, document):
        path = self.create_tempfile().full_path  # a name of its own each time
        with open(path, "w") as f:
            f.write(document if isinstance(document, str) else json.dumps(document))
        return path

    def test_a_price_file_replaces_what_it_names(self):
        path = self._price_file({
            "source": "our committed-use contract", "date": "2026-11-30",
            "prices": {"tpu-v5p": {"on_demand": 2.94}, "gpu-h100x2": {"on_demand": 9.5,
                                                                       "spot": None}}})
        table = machines.priced(prices=machines.load_prices(path))
        self.assertAlmostEqual(table["tpu-v5p-16"].dollars_per_hour, 8 * 2.94)
        self.assertAlmostEqual(table["tpu-v5p-16"].spot_dollars_per_hour, 8 * 1.68)  # kept
        self.assertIn("our committed-use contract", table["tpu-v5p-16"].price.source)
        self.assertIn("spot: ", table["tpu-v5p-16"].price.source)  # where the kept one is from
        self.assertEqual(table["tpu-v5p-16"].price.date, "2026-11-30")
        self.assertAlmostEqual(table["gpu-h100x2"].dollars_per_hour, 19.0)
        self.assertIsNone(table["gpu-h100x2"].spot_dollars_per_hour)
        self.assertAlmostEqual(table["gpu-h100x8"].dollars_per_hour, 88.48)  # the family's
        # A machine's entry keeps what it leaves out from the file's family entry, and a
        # figure kept from the table keeps its caveat and says where it is from.
        path = self._price_file({
            "source": "ours", "prices": {"tpu-v5p-8": {"spot": 0.5},
                                         "tpu-v5p": {"on_demand": 2.94, "spot": 1.0},
                                         "gpu-b200": {"spot": 5.0}}})
        table = machines.priced(prices=machines.load_prices(path))
        self.assertEqual((table["tpu-v5p-8"].price.on_demand, table["tpu-v5p-8"].price.spot),
                         (2.94, 0.5))
        self.assertEqual(table["tpu-v5p-16"].price.spot, 1.0)
        b200 = table["gpu-b200x8"].price
        self.assertEqual((b200.on_demand, b200.spot), (90.216 / 8, 5.0))
        self.assertIn("lower bound", b200.note)  # the kept figure's caveat, not the other's
        self.assertEqual(b200.spot_note, "")
        self.assertIn("on demand kept from SkyPilot's GCP catalog", b200.source)
        self.assertEqual(b200.date, "2026-12-07")
        # A file without a date that replaces every figure takes no date from the table.
        whole = self._price_file({"source": "ours", "prices": {
            "tpu-v5p": {"on_demand": 2.0, "spot": 1.0}, "gpu-b200": {"on_demand": 14.0}}})
        prices = machines.load_prices(whole)
        self.assertEqual((prices["tpu-v5p"].date, prices["tpu-v5p"].note), ("", ""))
        self.assertEqual(prices["gpu-b200"].note, "")  # not "a lower bound" any more
        # use_prices re-prices this process's table, and the default puts it back.
        try:
            machines.use_prices("us-central1", path)
            self.assertAlmostEqual(machines.get("tpu-v5p-8").dollars_per_hour, 4 * 2.94)
        finally:
            machines.use_prices()
        self.assertEqual(machines.get("tpu-v5p-8").dollars_per_hour, 16.80)

    def test_a_bad_price_file_is_one_error_naming_the_entry(self):
        good = {"source": "ours"}
        for document, message in (
                ("{not json", "not a readable JSON file"),
                ({"prices": {}}, '"source"'),
                ({**good, "prices": {"tpu-v9": {"on_demand": 1}}}, "'tpu-v9' is neither"),
                ({**good, "prices": {"cpu": {"on_demand": 1}}}, "'cpu' is neither"),
                ({**good, "prices": {"tpu-v5p": {"on_demand": -1}}}, r"tpu-v5p.on_demand"),
                ({**good, "prices": {"tpu-v5p": {"on_demand": "4.2"}}}, r"not '4.2'"),
                ({**good, "prices": {"tpu-v5p": {"on_demand": True}}}, r"not True"),
                ({**good, "prices": {"tpu-v5p": {"ondemand": 4}}}, "expected"),
                ({**good, "prices": {"tpu-v5p": 4.2}}, "expected"),
                ({**good, "date": 2026, "prices": {}}, '"date"'),
                ({**good, "date": "yesterday", "prices": {}}, '"date" is YYYY-MM-DD'),
                ({**good, "date": "2026-13-45", "prices": {}}, '"date" is YYYY-MM-DD'),
                ("[" * 100000 + "]" * 100000, "not a readable JSON file"),
                ({**good, "region": "europe-west4", "prices": {}}, "for region 'europe-west4'"),
                ('{"source": "a", "source": "b", "prices": {}}', "'source' is given twice"),
                ({**good, "prices": {"tpu-v5p": {"on_demand": 10**400}}}, "tpu-v5p.on_demand"),
                ({**good, "prices": {"tpu-v5p": {"on_demand": 1e308}}}, "tpu-v5p.on_demand"),
                ({**good, "prices": {"tpu-v5p": {"spot": float("nan")}}}, "tpu-v5p.spot"),
                ([1, 2], '"source"')):
            with self.subTest(message):
                with self.assertRaisesRegex(machines.PriceError, message) as raised:
                    machines.load_prices(self._price_file(document))
                self.assertIsInstance(raised.exception, cli.UserError)
        with self.assertRaisesRegex(machines.PriceError, "not a readable JSON file"):
            machines.load_prices("/nonexistent/prices.json")
        # A refused file or region changes nothing.
        for region, path in (("us-central1", self._price_file({"prices": {}})),
                             ("US Central", None), ("", None), (None, None)):
            with self.assertRaises(machines.PriceError):
                machines.use_prices(region, path)
        self.assertEqual(machines.get("tpu-v5p-8").dollars_per_hour, 16.80)
        self.assertEqual(machines.check_region(" US-Central1 "), "us-central1")
        zero = self._price_file({"source": "ours", "prices": {"tpu-v5p": {"spot": -0.0}}})
        self.assertEqual(str(machines.load_prices(zero)["tpu-v5p"].spot), "0.0")

    def test_every_machine_says_where_its_figures_come_from(self):
        for machine in machines.MACHINES.values():
            self.assertTrue(machine.source, machine.name)

    def test_platform_of_every_machine(self):
        self.assertEqual({m.platform for m in machines.MACHINES.values()},
                         {"cpu", "tpu", "gpu"})
        for name, machine in machines.MACHINES.items():
            self.assertEqual(machine.platform, name.split("-")[0], name)

    def test_the_slices_people_rent(self):
        for name, (chips, hosts, topology) in {
                "tpu-v5litepod-1": (1, 1, "v5e:1x1"), "tpu-v5litepod-8": (8, 1, "v5e:2x4"),
                "tpu-v5litepod-16": (16, 4, "v5e:4x4"), "tpu-v5litepod-32": (32, 8, "v5e:4x8"),
                "tpu-v6e-1": (1, 1, "v6e:1x1"), "tpu-v6e-8": (8, 1, "v6e:2x4"),
                "tpu-v6e-32": (32, 8, "v6e:4x8"), "tpu-v5p-32": (16, 4, "v5p:2x2x4"),
                "gpu-h100x16": (16, 2, "")}.items():
            machine = machines.get(name)
            self.assertEqual((machine.chips, machine.hosts, machine.topology),
                             (chips, hosts, topology), name)
        self.assertEqual(machines.get("tpu-v5litepod-16").peak_flops_per_chip, 197e12)
        self.assertEqual(machines.get("tpu-v6e-1").peak_flops_per_chip, 918e12)
        self.assertAlmostEqual(machines.get("gpu-h100x8").dollars_per_hour, 88.48)
        self.assertAlmostEqual(machines.get("gpu-h100x8").spot_dollars_per_hour, 53.0936245)
        self.assertAlmostEqual(machines.get("gpu-h100x2").spot_dollars_per_hour, 13.2734061)
        self.assertAlmostEqual(machines.get("tpu-v5litepod-8").dollars_per_hour, 9.60)
        self.assertAlmostEqual(machines.get("tpu-v5litepod-16").dollars_per_vm_hour, 4.80)
        self.assertAlmostEqual(machines.get("tpu-v6e-8").spot_dollars_per_hour, 8 * 0.64833)
        self.assertEqual([machines.get(n).hbm_gbps_per_chip for n in (
            "tpu-v5litepod-1", "tpu-v6e-8", "tpu-v5p-8", "gpu-h100x2", "gpu-h200x8",
            "gpu-b200x8")], [819.0, 1638.0, 2765.0, 3350.0, 4800.0, 8000.0])
        self.assertEqual(machines.get("gpu-b200x8").peak_flops_per_chip, 2250e12)

    def test_invariants(self):
        per_chip = {}
        for name, machine in machines.MACHINES.items():
            with self.subTest(name):
                self.assertGreaterEqual(machine.hosts, 1)
                self.assertEqual(machine.chips % machine.hosts, 0)
                # GKE schedules every accelerator by its label (common/kubernetes.py).
                self.assertEqual(bool(machine.gke_accelerator), machine.platform != "cpu")
                if machine.platform == "tpu":
                    # The topology holds exactly the machine's chips.
                    generation, shape = machine.topology.split(":")
                    self.assertEqual(name.split("-")[1].replace("litepod", "e"), generation)
                    product = 1
                    for side in shape.split("x"):
                        product *= int(side)
                    self.assertEqual(product, machine.chips)
                # Every accelerator's memory bandwidth is recorded (the planner's roofline).
                self.assertEqual(machine.hbm_gbps_per_chip > 0, machine.platform != "cpu")
                if machine.spot_dollars_per_hour is not None:
                    self.assertLess(machine.spot_dollars_per_hour, machine.dollars_per_hour)
                if machine.dollars_per_hour is not None and machine.chips:
                    family = name.rsplit("-", 1)[0] if machine.platform == "tpu" else "h100" \
                        if "h100" in name else name
                    per_chip.setdefault(family, set()).add(
                        round(machine.dollars_per_hour / machine.chips, 6))
        # Google prices TPU slices and A3 VMs per chip: one price per generation.
        for family, prices in per_chip.items():
            self.assertLen(prices, 1, family)

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
