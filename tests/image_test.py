"""//serving:tpu_image is reproducible and round-trips through a registry.

Builds the image twice, each time with a fresh Bazel output base, and requires
the same manifest digest and layer diff_ids. The two builds share only the
source tree and the installed packages (the `*_site` repositories: 5 GB that
the analysis of //serving:serve needs and no layer holds, which the test
checks): those of the Bazel running this test where nothing they were made
from has changed (`current_sites`), else the first build's; installing them
took 80 of a build's 85 s.
Then starts Debian's docker-registry on a free loopback port (storage in the
test's temp dir), pushes with `bazel run //serving:push_tpu_image --
--repository=127.0.0.1:PORT/...`, reads the digest back with `skopeo inspect`,
copies the image back out with skopeo and compares every layer byte for byte,
checks the labels, and unpacks it with umoci to find the project's files.

Runs Bazel inside the test (tag `local`): offline mode, as ./bazelw runs it.
"""

import glob
import gzip
import hashlib
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request

from absl.testing import absltest

from common import repo

_TARGET = "//serving:tpu_image"
_PUSH = "//serving:push_tpu_image"
_TOOLS = ("bazel-4", "docker-registry", "skopeo", "umoci")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def current_sites(root, env):
    """{name: path} of the `*_site` repositories (installed packages) of the Bazel
    running this test that an inner Bazel of this tree with `env` would install
    alike: every input their repository markers record is unchanged (each file
    of the tree, the interpreter, each environment variable), and the files
    that declare the rule and its arguments are older than the install."""
    output_base, separator, _ = os.path.realpath(os.environ.get("TEST_SRCDIR", "")).partition(
        "/execroot/")
    if not separator:  # not run by Bazel
        return {}
    external = os.path.join(output_base, "external")
    declared = max(os.path.getmtime(os.path.join(root, path)) for path in _DECLARING)
    found = {}
    for name in os.listdir(external) if os.path.isdir(external) else ():
        marker = os.path.join(external, f"@{name}.marker")
        if not name.endswith("_site") or not os.path.exists(marker) \
                or os.path.getmtime(marker) < declared:
            continue
        with open(marker) as f:
            inputs = f.read().splitlines()[1:]  # after the rule's own key
        if all(_unchanged(line, root, external, env) for line in inputs):
            found[name] = os.path.join(external, name)
    return found


# Where the `*_site` repositories' rule and arguments are written (the marker's
# first line is their hash, which only Bazel computes).
_DECLARING = ("WORKSPACE", "third_party/offline/repositories.bzl")


def _unchanged(line, root, external, env):
    """Whether one input a repository marker records is as it was."""
    kind, _, rest = line.partition(":")
    if kind == "FILE":
        label, _, digest = rest.rpartition(" ")
        repository, _, path = label.partition("//")
        path = path.replace(":", "/").lstrip("/")
        base = os.path.join(external, repository[1:]) if repository else root
        return _sha256(os.path.realpath(os.path.join(base, path))) == digest
    if kind == "ENV":
        name, _, value = rest.partition(" ")
        return env.get(name, "") == value
    return line.startswith(("STARLARK_SEMANTICS", "$MANAGED")) or not line.strip()


def _sha256(path):
    if not os.path.isfile(path):
        return None
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def overrides(sites):
    return [f"--override_repository={name}={path}" for name, path in sorted(sites.items())]


def read_json(path):
    with open(path, "rb") as f:
        return json.load(f)


class Layout:
    """The one image of an OCI layout: manifest digest, manifest, config, blobs."""

    def __init__(self, root):
        self.root = root
        index = read_json(os.path.join(root, "index.json"))
        self.digest = index["manifests"][0]["digest"]
        self.manifest = json.loads(self.blob(self.digest))
        self.config = json.loads(self.blob(self.manifest["config"]["digest"]))

    def blob(self, digest):
        with open(os.path.join(self.root, "blobs", *digest.split(":")), "rb") as f:
            return f.read()

    def layers(self):
        return [self.blob(layer["digest"]) for layer in self.manifest["layers"]]


class ImageTest(absltest.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        missing = [tool for tool in _TOOLS if not shutil.which(tool)]
        if missing:
            raise AssertionError(f"{', '.join(missing)} not installed: `./bazelw test` "
                                 "installs them (Debian: bazel-bootstrap, docker-registry, "
                                 "skopeo, umoci)")
        cls.root = repo.source_root()
        # Short paths: Bazel's server socket lives in its output base.
        cls.tmp = tempfile.mkdtemp(prefix="g4img-", dir="/tmp")
        cls.options = {}
        # The inner Bazel's environment: this one's without the test's own runfiles
        # and temp dir, and the accelerator ./bazelw exports (the packages it picks).
        cls.env = {k: v for k, v in os.environ.items()
                   if not k.startswith(("RUNFILES_", "TEST_", "PYTHON"))}
        cls.env["G4_ACCELERATOR"] = subprocess.run(
            [sys.executable, "tools/accelerator.py"], cwd=cls.root, check=True,
            capture_output=True, text=True, env=cls.env).stdout.strip()
        installed = current_sites(cls.root, cls.env)
        print(f"installed packages of this test's Bazel: {sorted(installed) or 'none current'}")
        started = time.monotonic()
        first = cls.bazel_build("a", *overrides(installed))
        print(f"build a: {time.monotonic() - started:.0f} s")
        external = os.path.join(first[0], "external")
        installed.update({name: os.path.join(external, name) for name in os.listdir(external)
                          if name.endswith("_site") and name not in installed
                          and os.path.isdir(os.path.join(external, name))})
        cls.shared = sorted(installed)
        started = time.monotonic()
        cls.outputs = [first, cls.bazel_build("b", *overrides(installed))]
        print(f"build b: {time.monotonic() - started:.0f} s")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)
        super().tearDownClass()

    @classmethod
    def bazel(cls, output_base, command, *args, check=True):
        """Runs Bazel's `command` in `output_base` with the options it was built with
        (the same repository overrides: with others, it installs packages again)."""
        argv = ["bazel-4", "--batch", f"--output_user_root={cls.tmp}/user",
                f"--output_base={output_base}", command, "--config=offline",
                "--symlink_prefix=/", *cls.options.get(output_base, ()), *args]
        done = subprocess.run(argv, cwd=cls.root, capture_output=True, text=True,
                              check=False, timeout=900, env=cls.env)
        if check and done.returncode:
            raise AssertionError(f"{' '.join(argv)} failed:\n{done.stderr[-4000:]}")
        return done

    @classmethod
    def bazel_build(cls, name, *options):
        """Builds the image with a fresh output base; returns (output base, layout dir)."""
        output_base = os.path.join(cls.tmp, name)
        cls.options[output_base] = options
        cls.bazel(output_base, "build", _TARGET)
        bin_dir = cls.bazel(output_base, "info", "bazel-bin").stdout.strip()
        return output_base, os.path.join(bin_dir, "serving", "tpu_image")

    def test_two_clean_builds_are_identical(self):
        (_, first), (_, second) = self.outputs
        self.assertNotEqual(os.path.realpath(first), os.path.realpath(second))
        a, b = Layout(first), Layout(second)
        print(f"build a: {a.digest}\nbuild b: {b.digest}")
        self.assertEqual(a.digest, b.digest)
        self.assertEqual(a.config["rootfs"]["diff_ids"], b.config["rootfs"]["diff_ids"])
        self.assertLen(a.config["rootfs"]["diff_ids"], 3)  # base stand-in, Python, project
        # What the two builds share, installed packages, is in no
        # layer: no file a layer was made from (its manifest: path in the image,
        # then source) comes from those repositories.
        self.assertIn("pypi_serve_site", self.shared)
        manifests = glob.glob(first + "_*_layer.files")
        self.assertLen(manifests, 2)  # Python, project
        for manifest in manifests:
            with open(manifest) as f:
                sources = [line.rstrip("\n").split("\t")[1] for line in f if line.strip()]
            self.assertNotEmpty(sources)
            self.assertEqual([source for source in sources
                              if any(name in source for name in self.shared)], [], manifest)
        for layer, diff_id in zip(a.layers(), a.config["rootfs"]["diff_ids"]):
            self.assertEqual(layer[:2], b"\x1f\x8b")
            self.assertEqual(layer[4:8], b"\0\0\0\0")  # gzip header mtime 0
            self.assertEqual(layer[3] & 0x08, 0)  # no file name in the header
            self.assertEqual("sha256:" + hashlib.sha256(gzip.decompress(layer)).hexdigest(),
                             diff_id)

    def test_push_without_a_repository_is_one_clear_error(self):
        output_base, _ = self.outputs[0]
        done = self.bazel(output_base, "run", _PUSH, check=False)
        self.assertNotEqual(done.returncode, 0)
        errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
        self.assertEqual(errors, ["error: no repository to push to: pass "
                                  "--repository=HOST/PATH (e.g. --repository="
                                  "us-docker.pkg.dev/PROJECT/REPO/IMAGE)"], done.stderr[-2000:])

    def test_an_offline_image_is_not_pushed_where_it_would_be_run(self):
        output_base, _ = self.outputs[0]
        done = self.bazel(output_base, "run", _PUSH,
                          "--", "--repository=us-docker.pkg.dev/my-project/images/serve-tpu",
                          check=False)
        self.assertNotEqual(done.returncode, 0)
        errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
        self.assertLen(errors, 1, done.stderr[-2000:])
        self.assertIn("not pushing to us-docker.pkg.dev/my-project/images/serve-tpu: this image "
                      "was built offline", errors[0])
        self.assertIn("cannot run on a TPU or GPU", errors[0])

    def test_push_round_trip(self):
        output_base, layout_dir = self.outputs[0]
        local = Layout(layout_dir)
        port = free_port()
        registry = os.path.join(self.tmp, "registry")
        os.makedirs(registry, exist_ok=True)
        config = os.path.join(registry, "config.yml")
        with open(config, "w") as f:
            f.write(f"version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n"
                    f"    rootdirectory: {registry}/data\nhttp:\n  addr: 127.0.0.1:{port}\n")
        server = subprocess.Popen(["docker-registry", "serve", config],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(server.wait, 10)
        self.addCleanup(server.terminate)
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.2)

        repository = f"127.0.0.1:{port}/gemma4/serve-tpu"
        pushed = self.bazel(output_base, "run", _PUSH, "--", f"--repository={repository}",
                            "--tag=ci")
        print(pushed.stdout.strip())
        self.assertEqual(pushed.stdout.strip().splitlines()[-1], f"{repository}@{local.digest}")

        def inspect(reference, *extra):
            return subprocess.run(
                ["skopeo", "inspect", "--tls-verify=false", *extra, f"docker://{reference}"],
                check=True, capture_output=True, text=True).stdout
        self.assertEqual(inspect(f"{repository}:ci", "--format", "{{.Digest}}").strip(),
                         local.digest)
        tags = json.loads(subprocess.run(
            ["skopeo", "list-tags", "--tls-verify=false", f"docker://{repository}"],
            check=True, capture_output=True, text=True).stdout)["Tags"]
        self.assertEqual(tags, ["ci"])  # --tag=ci, and no `latest`
        remote = json.loads(inspect(f"{repository}@{local.digest}"))
        self.assertEqual(remote["Layers"], [l["digest"] for l in local.manifest["layers"]])

        back = os.path.join(self.tmp, "back")
        subprocess.run(["skopeo", "copy", "--quiet", "--src-tls-verify=false",
                        f"docker://{repository}@{local.digest}", f"oci:{back}:back"],
                       check=True)
        copied = Layout(back)
        self.assertEqual(copied.digest, local.digest)
        self.assertEqual(copied.layers(), local.layers())  # byte for byte

        labels = remote["Labels"]
        with open(os.path.join(self.root, "third_party", "requirements",
                               "serve_image_lock.txt"), "rb") as f:
            lock_hash = "sha256:" + hashlib.sha256(f.read()).hexdigest()
        self.assertEqual(labels["dev.gemma4-toolkit.lock.serve_image"], lock_hash)
        self.assertEqual(labels["org.opencontainers.image.base.name"], "docker.io/vllm/vllm-tpu")
        with open(os.path.join(self.root, "MODULE.bazel")) as f:
            self.assertIn(f'digest = "{labels["org.opencontainers.image.base.digest"]}"',
                          f.read())
        self.assertRegex(labels["dev.gemma4-toolkit.version.vllm"], r"^\d+\.\d+")
        status = subprocess.run([os.path.join(self.root, "tools", "workspace_status.sh")],
                                cwd=self.root, check=True, capture_output=True, text=True)
        self.assertEqual(f"STABLE_GIT_COMMIT {labels['org.opencontainers.image.revision']}",
                         status.stdout.strip())

        bundle = os.path.join(self.tmp, "bundle")
        subprocess.run(["umoci", "unpack", "--rootless", "--image", f"{back}:back", bundle],
                       check=True, capture_output=True)
        rootfs = os.path.join(bundle, "rootfs")
        with open(os.path.join(rootfs, "app", "serving", "serve.py"), "rb") as f, \
                open(os.path.join(self.root, "serving", "serve.py"), "rb") as g:
            self.assertEqual(f.read(), g.read())
        self.assertTrue(os.path.exists(os.path.join(rootfs, "opt", "g4", "locks",
                                                    "serve_image_lock.txt")))
        self.assertTrue(os.path.exists(os.path.join(rootfs, "etc", "gemma4-offline-base")))
        entrypoint = local.config["config"]["Entrypoint"]
        self.assertEqual(entrypoint[:3], ["python3", "-m", "serving.serve"])
        self.assertIn("--config=v6e8.py", entrypoint)
        with tarfile.open(fileobj=io.BytesIO(gzip.decompress(local.layers()[-1]))) as tar:
            for member in tar.getmembers():
                self.assertEqual((member.mtime, member.uid, member.gid, member.uname),
                                 (0, 0, 0, ""), member.name)


if __name__ == "__main__":
    absltest.main()
