import os

from absl.testing import absltest

from tools import pip_hub


def _dist(staging, name, version, files, requires=()):
    """A distribution as an installer leaves it: its files and a dist-info."""
    dist_info = f"{name}-{version}.dist-info"
    for path, text in {**files, f"{dist_info}/METADATA": "".join(
            [f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"]
            + [f"Requires-Dist: {r}\n" for r in requires])}.items():
        full = os.path.join(staging, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as f:
            f.write(text)
    with open(os.path.join(staging, dist_info, "RECORD"), "w") as f:
        f.writelines(f"{path},,\n" for path in [*files, f"{dist_info}/METADATA"])
        f.write(f"{dist_info}/RECORD,,\n../../bin/tool,,\n")


class PipHubTest(absltest.TestCase):

    def setUp(self):
        super().setUp()
        self.staging = self.create_tempdir().full_path
        self.site = os.path.join(self.create_tempdir().full_path, pip_hub.SITE)

    def test_one_folder_per_package_with_deps_from_its_metadata(self):
        _dist(self.staging, "Alpha.Pkg", "1.0", {"alpha/__init__.py": "A = 1\n",
                                                "google/alpha/x.py": ""},
              requires=["beta>=1", "gamma; extra == 'fast'", "delta; python_version < '3'",
                        "not-locked"])
        _dist(self.staging, "beta", "2.0", {"beta.py": "", "google/beta/y.py": ""})
        _dist(self.staging, "gamma", "1.0", {"gamma.py": ""})
        _dist(self.staging, "delta", "1.0", {"delta.py": ""})
        hashes = pip_hub.split(self.staging, self.site)
        self.assertEqual(sorted(hashes), ["alpha_pkg", "beta", "delta", "gamma"])
        self.assertTrue(os.path.isfile(os.path.join(self.site, "alpha_pkg", "alpha",
                                                    "__init__.py")))
        # A namespace shared by two packages lies in both folders, each its own part.
        self.assertTrue(os.path.isfile(os.path.join(self.site, "beta", "google", "beta", "y.py")))
        self.assertFalse(os.path.exists(os.path.join(self.site, "alpha_pkg", "google", "beta")))
        with open(os.path.join(self.site, "beta", pip_hub.IMPORT_ROOT)) as f:
            self.assertTrue(f.read().strip())
        build = pip_hub.build_file(self.site, {"alpha_pkg", "beta", "gamma", "delta"})
        # Extras of the requirer and other interpreters' markers are left out.
        self.assertIn('    name = "alpha_pkg",\n    data = ["site-packages/alpha_pkg/.import_root"],\n'
                      '    imports = ["site-packages/alpha_pkg"],\n    deps = [":beta"],\n', build)
        self.assertIn('    imports = ["site-packages/gamma"],\n)', build)

    def test_files_no_record_names_are_refused(self):
        _dist(self.staging, "beta", "2.0", {"beta.py": ""})
        with open(os.path.join(self.staging, "stray.py"), "w") as f:
            f.write("")
        with self.assertRaisesRegex(pip_hub.HubError, "in no RECORD, e.g. stray.py"):
            pip_hub.split(self.staging, self.site)

    def test_a_locked_package_not_installed_is_named(self):
        _dist(self.staging, "beta", "2.0", {"beta.py": ""})
        pip_hub.split(self.staging, self.site)
        with self.assertRaisesRegex(pip_hub.HubError, "locked but not installed: gamma"):
            pip_hub.build_file(self.site, {"beta", "gamma"})

    def test_cycles_are_named(self):
        self.assertIsNone(pip_hub.find_cycle({"a": {"b"}, "b": set()}))
        self.assertEqual(pip_hub.find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}),
                         ["a", "b", "c", "a"])
        _dist(self.staging, "a", "1", {"a.py": ""}, requires=["b"])
        _dist(self.staging, "b", "1", {"b.py": ""}, requires=["a"])
        pip_hub.split(self.staging, self.site)
        with self.assertRaisesRegex(pip_hub.HubError, "cycle.*a -> b -> a"):
            pip_hub.build_file(self.site, {"a", "b"})

    def test_lock_names(self):
        lock = os.path.join(self.create_tempdir().full_path, "x_lock.txt")
        with open(lock, "w") as f:
            f.write("# c\nAbsl-Py==2.5.1 \\\n    --hash=sha256:00\n    # via x\nzope.interface==7\n")
        self.assertEqual(pip_hub.lock_packages(lock),
                         {"absl_py": "Absl-Py", "zope_interface": "zope.interface"})


if __name__ == "__main__":
    absltest.main()
