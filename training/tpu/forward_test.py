"""The packed forward pass: splash attention with segment ids equals dense masked
attention (outputs and gradients, Pallas interpret mode on CPU), the chunked
loss equals the full one, and the splash kernels' FLOPs are counted right."""

import tempfile

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from flax import nnx
from ml_collections import config_dict

from training.tpu import testing  # sets up 8 CPU devices first
# pylint: disable=wrong-import-order
from gemma4 import gemma4_map
from training.tpu import forward
from training.tpu import model as model_lib

BLOCK = 128
SPLASH = forward.Attention(kernel="splash", block=BLOCK, interpret=True)
DENSE = forward.Attention(kernel="dense")


def packed_segments(batch, length, rng):
    """Rows of 1-4 segments of random lengths, then padding (segment 0)."""
    segments = np.zeros((batch, length), np.int32)
    positions = np.zeros((batch, length), np.int32)
    for row in range(batch):
        start = 0
        for number in range(1, rng.integers(2, 6)):
            size = int(rng.integers(length // 8, length // 2))
            end = min(start + size, length - 5)
            segments[row, start:end] = number
            positions[row, start:end] = np.arange(end - start)
            start = end
    return segments, positions


def max_abs(a, b):
    return max(float(jnp.max(jnp.abs(x - y))) for x, y in zip(jax.tree.leaves(a),
                                                                jax.tree.leaves(b)))


class SegmentMaskTest(absltest.TestCase):

    def test_causal_within_segments_padding_its_own_segment(self):
        mask = np.asarray(forward.segment_mask(jnp.asarray([[1, 1, 2, 2, 2, 0]]), window=2))[0]
        np.testing.assert_array_equal(mask.astype(int), [
            [1, 0, 0, 0, 0, 0],
            [1, 1, 0, 0, 0, 0],
            [0, 0, 1, 0, 0, 0],
            [0, 0, 1, 1, 0, 0],
            [0, 0, 0, 1, 1, 0],  # the window (2) cuts key 2 off
            [0, 0, 0, 0, 0, 1]])


class SplashEqualsDenseTest(absltest.TestCase):
    """At the kernel: grouped heads, causal and sliding-window masks, several segments."""

    def check(self, window, mesh=None):
        rng = np.random.default_rng(0)
        batch, length, heads, kv_heads, head_dim = 2, 2 * BLOCK, 8, 4, 128
        q, k, v = (jnp.asarray(rng.standard_normal((batch, length, n, head_dim)), jnp.float32)
                   for n in (heads, kv_heads, kv_heads))
        segments, _ = packed_segments(batch, length, rng)
        segments = jnp.asarray(segments)
        cotangent = jnp.asarray(rng.standard_normal((batch, length, heads, head_dim)),
                                jnp.float32)
        splash = forward.Attention(kernel="splash", block=BLOCK, interpret=True, mesh=mesh)

        def run(attention):
            def scalar(q, k, v):
                return jnp.sum(forward.attend(q, k, v, segments, window, attention) * cotangent)
            out = forward.attend(q, k, v, segments, window, attention)
            return out, jax.grad(scalar, argnums=(0, 1, 2))(q, k, v)

        (dense_out, dense_grads), (splash_out, splash_grads) = run(DENSE), run(splash)
        out_diff, grad_diff = max_abs(dense_out, splash_out), max_abs(dense_grads, splash_grads)
        print(f"window {window}, mesh {mesh and dict(mesh.shape)}: max |splash - dense| "
              f"outputs {out_diff:.2e}, gradients {grad_diff:.2e} (gradient scale "
              f"{max(float(jnp.max(jnp.abs(g))) for g in dense_grads):.1f})")
        # float32 with different summation orders (blockwise online softmax).
        self.assertLess(out_diff, 1e-5)
        self.assertLess(grad_diff, 1e-4)
        return dense_out

    def test_causal(self):
        self.check(window=None)

    def test_sliding_window(self):
        # Narrower than a block, so partly visited blocks are masked inside the kernel.
        self.check(window=48)

    def test_sharded_over_the_mesh(self):
        # Batch over fsdp, heads over tp, as the training step shards them.
        self.check(window=None, mesh=testing.mesh(2, 2))

    def test_segments_do_not_see_each_other(self):
        # Changing segment 2's keys and values leaves segment 1's outputs alone.
        rng = np.random.default_rng(1)
        shape = (1, 2 * BLOCK, 2, 128)
        q, k, v = (jnp.asarray(rng.standard_normal(shape), jnp.float32) for _ in range(3))
        segments = jnp.asarray(np.repeat([1, 2], BLOCK)[None].astype(np.int32))
        before = forward.attend(q, k, v, segments, None, SPLASH)
        after = forward.attend(q, k.at[:, BLOCK:].add(1.0), v.at[:, BLOCK:].add(1.0),
                               segments, None, SPLASH)
        np.testing.assert_array_equal(before[:, :BLOCK], after[:, :BLOCK])
        self.assertGreater(float(jnp.max(jnp.abs(before[:, BLOCK:] - after[:, BLOCK:]))), 0.1)

    def test_block_must_divide_the_sequence(self):
        x = jnp.zeros((1, 192, 2, 128))
        with self.assertRaisesRegex(forward.ForwardError, "not a multiple of the block size"):
            forward.attend(x, x, x, jnp.ones((1, 192), jnp.int32), None, SPLASH)

    def test_unknown_kernel_is_refused(self):
        with self.assertRaisesRegex(forward.ForwardError, "one of dense, splash"):
            forward.Attention(kernel="flash")


class ModelTest(absltest.TestCase):
    """The whole packed step on a two-layer Gemma 4 (one sliding, one K = V global)."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        path, cls.dims = testing.tiny_checkpoint(
            tempfile.mkdtemp(dir=absltest.get_default_test_tmpdir()), multimodal=False,
            num_hidden_layers=2,
            layer_types=[gemma4_map.SLIDING, gemma4_map.GLOBAL])
        lora = config_dict.ConfigDict({
            "rank": 4, "alpha": 8.0, "dropout": 0.0,
            "target_modules": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                               "down_proj")})
        cls.model = model_lib.load(path, cls.dims, testing.mesh(1, 1), "float32", lora)
        # Non-zero B factors, so that LoRA changes the outputs and has gradients.
        model_lib.set_lora(cls.model, testing.random_factors(cls.dims, lora))
        rng = np.random.default_rng(2)
        segments, positions = packed_segments(2, 2 * BLOCK, rng)
        cls.batch = {"input_ids": jnp.asarray(rng.integers(5, cls.dims.vocab, segments.shape),
                                              jnp.int32),
                     "segment_ids": jnp.asarray(segments), "positions": jnp.asarray(positions),
                     "loss_mask": jnp.asarray((segments > 0) & (positions > 0), jnp.int32)}
        cls.dense = cls.loss_and_grads(DENSE)

    @classmethod
    def loss_and_grads(cls, attention, chunk=0):
        forward.configure(cls.model, attention)
        graphdef, lora, rest = nnx.split(cls.model, nnx.LoRAParam, ...)

        def loss(lora):
            return forward.loss_sum(nnx.merge(graphdef, lora, rest), cls.batch, chunk)

        return jax.value_and_grad(loss)(lora)

    def test_splash_step_equals_dense_step(self):
        dense_loss, dense_grads = self.dense
        splash_loss, splash_grads = self.loss_and_grads(SPLASH)
        grad_diff = max_abs(dense_grads, splash_grads)
        scale = max(float(jnp.max(jnp.abs(g))) for g in jax.tree.leaves(dense_grads))
        print(f"two-layer step: loss dense {float(dense_loss):.6f} splash "
              f"{float(splash_loss):.6f}; max |LoRA gradient difference| {grad_diff:.2e} "
              f"of {scale:.2f}")
        self.assertAlmostEqual(float(splash_loss), float(dense_loss),
                               delta=1e-5 * float(dense_loss))
        self.assertLess(grad_diff, 1e-4 * scale)

    def test_chunked_loss_equals_full_loss(self):
        full_loss, full_grads = self.dense
        # 100 does not divide the 255 predicted positions: the last chunk is padded.
        chunked_loss, chunked_grads = self.loss_and_grads(DENSE, chunk=100)
        self.assertAlmostEqual(float(chunked_loss), float(full_loss),
                               delta=1e-5 * float(full_loss))
        scale = max(float(jnp.max(jnp.abs(g))) for g in jax.tree.leaves(full_grads))
        self.assertLess(max_abs(full_grads, chunked_grads), 1e-5 * scale)

    def test_padding_changes_nothing_trained(self):
        forward.configure(self.model, DENSE)
        changed = dict(self.batch)
        padding = self.batch["segment_ids"] == 0
        changed["input_ids"] = jnp.where(padding, 7, self.batch["input_ids"])
        self.assertEqual(float(forward.loss_sum(self.model, changed)),
                         float(forward.loss_sum(self.model, self.batch)))


class KernelFlopsTest(absltest.TestCase):

    def test_visited_blocks_are_those_the_masks_allow(self):
        for length, block, window in ((1024, 128, 300), (3072, 512, 1024), (512, 512, 16)):
            dims = gemma4_map.Dims(
                vocab=1, embed=1, mlp=1, heads=2, head_dim=128, kv_heads=1,
                global_kv_heads=1, global_head_dim=256, k_eq_v_global=True,
                layer_types=(gemma4_map.SLIDING, gemma4_map.GLOBAL), sliding_window=window,
                final_logit_softcap=None, local_rope_theta=1.0, global_rope_theta=1.0,
                global_rope_proportion=1.0)
            blocks = length // block
            counts = []
            for layer_window in (window, None):
                mask = np.asarray(forward.segment_mask(jnp.ones((1, length), jnp.int32),
                                                       layer_window))[0]
                counts.append(int(mask.reshape(blocks, block, blocks, block)
                                  .any(axis=(1, 3)).sum()))
            per_matmul = 2 * block * block * dims.heads
            want = 9 * per_matmul * (counts[0] * 128 + counts[1] * 256)
            self.assertEqual(forward.kernel_flops(dims, length, block, remat=True), want)
            self.assertEqual(forward.kernel_flops(dims, length, block, remat=False),
                             want * 7 // 9)


if __name__ == "__main__":
    absltest.main()
