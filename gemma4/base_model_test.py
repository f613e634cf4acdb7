"""A Hub download's failure is one line, and a gated base's names the fix."""

import os
from unittest import mock

from absl.testing import absltest

from gemma4 import base_model


class GatedRepoError(Exception):
    """Stands for huggingface_hub's, matched by name as base_model matches it."""


class HubErrorTest(absltest.TestCase):

    def test_a_gated_base_without_a_token_names_the_licence_and_the_token(self):
        failure = GatedRepoError("401 Client Error. (Request ID: x)\n\nCannot access gated "
                                 "repo for url https://huggingface.co/google/gemma-4-31B-it.")
        with mock.patch.dict(os.environ, {"HF_TOKEN": ""}), \
                mock.patch("huggingface_hub.snapshot_download", side_effect=failure):
            with self.assertRaises(base_model.BaseModelError) as raised:
                base_model.resolve("google/gemma-4-31B-it", self.create_tempdir().full_path)
        message = str(raised.exception)
        self.assertNotIn("\n", message)
        self.assertIn("google/gemma-4-31B-it is gated or private and no HF_TOKEN is set: "
                      "accept its licence at https://huggingface.co/google/gemma-4-31B-it",
                      message)
        self.assertIn("export HF_TOKEN=", message)

    def test_other_failures_keep_their_first_line(self):
        self.assertEqual(base_model.hub_error("a/b", OSError("no route to host\nmore")),
                         "no route to host")


if __name__ == "__main__":
    absltest.main()
