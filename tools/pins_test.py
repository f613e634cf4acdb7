import os
import textwrap

from absl.testing import absltest

from tools import pins

_HASH = "--hash=sha256:" + "ab" * 32


class PinCheckerTest(absltest.TestCase):
    """The checker itself catches each way of leaving something unpinned."""

    def setUp(self):
        super().setUp()
        self.root = self.create_tempdir().full_path
        os.makedirs(os.path.join(self.root, "locks"))
        self._lock(f"absl-py==2.5.1 \\\n    {_HASH}\n")

    def _lock(self, text):
        with open(os.path.join(self.root, "locks", "a.txt"), "w") as f:
            f.write(text)

    def _check(self, body):
        return pins.module_problems(textwrap.dedent(body), self.root)

    def test_pinned_module_passes(self):
        self.assertEqual(self._check("""\
            V = "3.11.13"
            bazel_dep(name = "rules_python", version = "1.8.5")
            python.toolchain(python_version = V)
            oci.pull(name = "base", image = "x/y", digest = "sha256:%s")
            pip.parse(hub_name = "h", requirements_lock = "//locks:a.txt")
            git_override(module_name = "m", remote = "r", commit = "%s")
            """ % ("0" * 64, "1" * 40)), [])

    def test_unpinned_things_are_reported(self):
        cases = {
            'bazel_dep(name = "rules_python")': "version must be an exact version",
            'bazel_dep(name = "rules_python", version = "1.8")': "exact version",
            'python.toolchain(python_version = "3.11")': "exact x.y.z",
            'oci.pull(name = "b", image = "x/y", tag = "latest")': "sha256 digest",
            'oci.pull(name = "b", image = "x/y", digest = "sha256:abc")': "sha256 digest",
            'http_archive(name = "a", urls = ["u"])': "sha256 or integrity",
            'git_override(module_name = "m", branch = "main")': "40-hex commit",
            'pip.parse(hub_name = "h", requirements_lock = "//locks:none.txt")':
                "does not exist",
        }
        for body, message in cases.items():
            problems = self._check(body)
            self.assertLen(problems, 1, body)
            self.assertIn(message, problems[0])

    def test_lock_without_hash_or_exact_version(self):
        self._lock(f"absl-py==2.5.1\nnumpy>=2 \\\n    {_HASH}\n")
        problems = self._check(
            'pip.parse(hub_name = "h", requirements_lock = "//locks:a.txt")')
        self.assertEqual(problems, [
            "//locks:a.txt: absl-py==2.5.1: no --hash",
            "//locks:a.txt: numpy>=2: not pinned to an exact version",
        ])

    def test_image_problems(self):
        digest = "sha256:" + "0" * 64
        module = textwrap.dedent(f"""\
            BASE_IMAGE_TAGS = {{"b": "v1"}}
            oci.pull(name = "b", image = "docker.io/x/y", digest = "{digest}",
                     platforms = ["linux/amd64"])
            """)
        workspace = f'offline_base_image(name = "b_linux_amd64", image = "x/y@{digest}")\n'
        self.assertEqual(pins.image_problems(module, workspace, [f"x/y@{digest}"]), [])
        self.assertEqual(pins.pulled_images(module), [
            {"name": "b", "image": "docker.io/x/y", "digest": digest, "tag": "v1",
             "platforms": ["linux/amd64"]}])
        untagged = module.replace('"b": "v1"', '"c": "v1"')
        self.assertIn("no tag", pins.image_problems(untagged, workspace, [])[0])
        self.assertIn("no offline_base_image", pins.image_problems(module, "", [])[0])
        other = workspace.replace("x/y@", "x/z@")
        self.assertIn("MODULE.bazel pulls x/y@", pins.image_problems(module, other, [])[0])
        self.assertIn("not one of MODULE.bazel's pinned pulls",
                      pins.image_problems(module, workspace, ["x/y:latest"])[0])
        no_platform = module.replace('["linux/amd64"]', "[]")
        self.assertIn('needs platforms = ["linux/amd64"]',
                      pins.image_problems(no_platform, workspace, [])[0])
        self.assertEqual(pins.image_problems(module, workspace, [],
                                             [(f"x/y@{digest}", "@b_linux_amd64")]), [])
        self.assertIn("not on @b_linux_amd64", pins.image_problems(
            module, workspace, [], [(f"docker.io/x/y@{digest}", "@b")])[0])

    def test_bazelversion(self):
        self.assertEqual(pins.bazelversion_problems("8.4.2\n"), [])
        self.assertNotEqual(pins.bazelversion_problems("latest\n"), [])
        self.assertNotEqual(pins.bazelversion_problems("8.x\n"), [])


if __name__ == "__main__":
    absltest.main()
