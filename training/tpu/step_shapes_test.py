"""The step-model shapes: each is one_chip.py with its own fields changed, and no
two are the same step (the chip run itself is not here: docs/performance.md)."""

from unittest import mock

from absl.testing import absltest

from common import machines
from training.tpu import mesh_plan
from training.tpu import step_shapes


class ShapesTest(absltest.TestCase):

    def test_every_shape_is_one_chip_with_its_changes_and_none_repeats(self):
        chip = machines.get("tpu-v5litepod-1")
        seen = set()
        for name, (layers, divisor, fields) in step_shapes.SHAPES.items():
            config, got_layers, got_divisor = step_shapes.shape_config(name)
            self.assertEqual((config.model.random.layers, config.model.random.width_divisor),
                             (layers, divisor))
            self.assertEqual(config.machine, chip.name)
            flat = config.to_dict()
            for dotted, value in fields.items():
                holder = flat
                for part in dotted.split("."):
                    holder = holder[part]
                self.assertEqual(holder, value, f"{name}: {dotted}")
            self.assertEqual((got_layers, got_divisor), (layers, divisor))
            shape = (layers, divisor, mesh_plan.batch_shape(config), config.remat,
                     config.attention.kernel, config.data.packing, config.lora.rank,
                     config.dropout_rng)
            self.assertNotIn(shape, seen, f"{name} repeats another shape")
            seen.add(shape)

    def test_a_field_one_chip_does_not_have_is_refused(self):
        with mock.patch.dict(step_shapes.SHAPES, {"typo": (6, 2, {"data.max_seq_length": 8})}):
            with self.assertRaisesRegex(step_shapes.ShapesError,
                                        "^shape 'typo': one_chip.py has no field "
                                        "'data.max_seq_length'$"):
                step_shapes.shape_config("typo")

    def test_an_unknown_shape_is_one_error(self):
        with self.assertRaisesRegex(step_shapes.ShapesError,
                                    "^unknown shape 'huge'; known: one_chip, "):
            step_shapes.shape_config("huge")


if __name__ == "__main__":
    absltest.main()
