import os

from absl.testing import absltest

from eval import prompts
from eval import testing


class PromptsTest(absltest.TestCase):

    def test_zero_shot_messages_in_upstream_style(self):
        spec = testing.load_problem("Prob001_zero").prompt()
        messages = prompts.messages(spec)
        self.assertEqual([m["role"] for m in messages], ["system", "user"])
        self.assertIn("Verilog RTL designer", messages[0]["content"])
        user = messages[1]["content"]
        self.assertTrue(user.startswith("\nQuestion:\n" + spec.strip() + "\n"))
        self.assertIn("Enclose your code with [BEGIN] and [DONE].", user)
        self.assertTrue(user.endswith("\nAnswer:\n"))
        # One blank line between the spec and the instruction, as upstream.
        self.assertIn(spec.strip() + "\n\nEnclose your code", user)

    def test_shots_prefix_comes_first(self):
        icl_dir = prompts.icl_dir_for(testing.dataset_dir())
        self.assertIsNotNone(icl_dir)
        for shots in range(1, prompts.MAX_SHOTS + 1):
            prefix = prompts.shots_prefix(shots, icl_dir)
            self.assertEqual(prefix.count("\nAnswer:\n[BEGIN]\n"), shots)
            user = prompts.user_message("Build it.", prefix)
            self.assertTrue(user.startswith(prefix + "\nQuestion:\nBuild it.\n"))
        self.assertEqual(prompts.shots_prefix(0, None), "")

    def test_bad_shots(self):
        with self.assertRaises(ValueError):
            prompts.shots_prefix(5, prompts.icl_dir_for(testing.dataset_dir()))
        with self.assertRaises(FileNotFoundError):
            prompts.shots_prefix(1, None)

    def test_upstream_checkout_layout_uses_scripts(self):
        root = self.create_tempdir()
        root.mkdir("dataset_spec-to-rtl")
        root.create_file(os.path.join("scripts", prompts.SHOTS_FILE.format(shots=1)), "x")
        self.assertEqual(prompts.icl_dir_for(os.path.join(root.full_path, "dataset_spec-to-rtl")),
                         os.path.join(root.full_path, "scripts"))
        self.assertIsNone(prompts.icl_dir_for(self.create_tempdir().full_path))


if __name__ == "__main__":
    absltest.main()
