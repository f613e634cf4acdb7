import contextlib
import http.server
import json
import os
import threading
import time

from absl.testing import absltest

from common import config_cli
from common import gcs_emulator
from common import storage


class LocationTest(absltest.TestCase):

    def test_urls_stay_urls_and_paths_become_absolute(self):
        self.assertEqual(config_cli.user_path("gs://b/run/"), "gs://b/run")
        self.assertTrue(os.path.isabs(config_cli.user_path("runs/x")))
        for bad in ("s3://b/x", "gs://", "gs:///"):
            with self.assertRaisesRegex(storage.StorageError, "only local paths and gs://"):
                config_cli.user_path(bad)

    def test_local_output_dir_is_all_or_nothing(self):
        target = os.path.join(self.create_tempdir().full_path, "out")
        with self.assertRaises(ZeroDivisionError):
            with storage.output_dir(target) as tmp:
                open(os.path.join(tmp, "a"), "w").close()
                raise ZeroDivisionError
        self.assertFalse(os.path.exists(target))
        with storage.output_dir(target) as tmp:
            open(os.path.join(tmp, "a"), "w").close()
        self.assertEqual(os.listdir(target), ["a"])
        with self.assertRaisesRegex(storage.OutputExists, "--overwrite"):
            with storage.output_dir(target):
                pass

    def test_errors_name_the_cause(self):
        class HttpError(Exception):
            def __init__(self, code, message):
                super().__init__(message)
                self.code = code
        explain = lambda e: storage._explain("gs://b/x", e)  # pylint: disable=protected-access
        self.assertIn("gs://b does not exist", explain(FileNotFoundError("b/x")))
        self.assertIn("no Google Cloud credentials",
                      explain(HttpError(401, "Anonymous caller does not have access")))
        self.assertIn("denied", explain(HttpError(403, "forbidden")))


@contextlib.contextmanager
def refusing_server(code, message):
    """A loopback endpoint that answers every request as Cloud Storage refuses one."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def _refuse(self):
            body = json.dumps({"error": {"code": code, "message": message}}).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_DELETE = _refuse

        def log_message(self, *args):
            del args

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    saved = os.environ.get("STORAGE_EMULATOR_HOST")
    os.environ["STORAGE_EMULATOR_HOST"] = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        if saved is None:
            os.environ.pop("STORAGE_EMULATOR_HOST")
        else:
            os.environ["STORAGE_EMULATOR_HOST"] = saved


class RefusedTest(absltest.TestCase):
    """What gcsfs raises for Cloud Storage's refusals becomes one sentence."""

    def test_missing_credentials(self):
        with refusing_server(401, "Anonymous caller does not have storage.objects.create "
                                  "access to the Google Cloud Storage object."):
            with self.assertRaisesRegex(storage.StorageError,
                                        "cannot write to gs://b/run: no Google Cloud credentials"):
                storage.probe("gs://b/run")

    def test_denied_write(self):
        with refusing_server(403, "sa@p.iam.gserviceaccount.com does not have "
                                  "storage.objects.create access"):
            with self.assertRaisesRegex(storage.StorageError,
                                        "writing to gs://b is denied: the account needs"):
                storage.probe("gs://b/run")


class BucketTest(absltest.TestCase):
    """Against the emulator on loopback."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.enterClassContext(gcs_emulator.running("bkt"))

    def setUp(self):
        super().setUp()
        os.environ[storage.CACHE_ENV] = self.create_tempdir().full_path

    def test_json_round_trip_and_probe(self):
        where = "gs://bkt/t/json"
        storage.probe(where)
        storage.write_json(storage.join(where, "run.json"), {"a": [1, 2]})
        self.assertEqual(storage.read_json(storage.join(where, "run.json")), {"a": [1, 2]})
        self.assertTrue(storage.exists(storage.join(where, "run.json")))
        self.assertFalse(storage.exists(storage.join(where, f".write_probe.{os.getpid()}")))
        with self.assertRaisesRegex(storage.StorageError, "gs://bkt/t/json/none does not exist"):
            storage.read_json(storage.join(where, "none"))

    def test_a_missing_bucket_is_one_sentence_within_seconds(self):
        started = time.monotonic()
        with self.assertRaises(storage.StorageError) as caught:
            storage.probe("gs://no-such-bucket/run")
        self.assertLess(time.monotonic() - started, 10)
        self.assertIn("the bucket gs://no-such-bucket does not exist", str(caught.exception))
        self.assertEqual(len(str(caught.exception).splitlines()), 1)

    def test_output_dir_uploads_with_its_marker_last_or_not_at_all(self):
        where = "gs://bkt/t/out"
        with self.assertRaises(ZeroDivisionError):
            with storage.output_dir(where) as tmp:
                with open(os.path.join(tmp, "a.txt"), "w") as f:
                    f.write("a")
                raise ZeroDivisionError
        self.assertFalse(storage.exists(where))
        with storage.output_dir(where) as tmp:
            os.makedirs(os.path.join(tmp, "sub"))
            for name in ("a.txt", "sub/b.txt"):
                with open(os.path.join(tmp, name), "w") as f:
                    f.write(name)
        local = storage.fetch(where, require_complete=True)
        with open(os.path.join(local, "sub", "b.txt")) as f:
            self.assertEqual(f.read(), "sub/b.txt")
        with self.assertRaisesRegex(storage.OutputExists, "--overwrite"):
            with storage.output_dir(where):
                pass

    def test_fetch_copies_only_what_changed_and_refuses_incomplete_folders(self):
        where = "gs://bkt/t/fetch"
        storage.write_bytes(storage.join(where, "x/one"), b"1")
        storage.write_bytes(storage.join(where, "y/two"), b"2")
        with self.assertRaisesRegex(storage.StorageError, "incomplete"):
            storage.fetch(where, require_complete=True)
        local = storage.fetch(where, only=["x"])
        self.assertTrue(os.path.exists(os.path.join(local, "x", "one")))
        self.assertFalse(os.path.exists(os.path.join(local, "y")))
        os.remove(os.path.join(local, "x", "one"))  # gone locally: copied again
        storage.write_bytes(storage.join(where, "y/two"), b"22")
        with open(os.path.join(local, ".g4_fetched.json")) as f:
            before = f.read()
        storage.fetch(where)
        with open(os.path.join(local, "y", "two")) as f:
            self.assertEqual(f.read(), "22")
        self.assertTrue(os.path.exists(os.path.join(local, "x", "one")))
        with open(os.path.join(local, ".g4_fetched.json")) as f:
            self.assertNotEqual(f.read(), before)
        with self.assertRaisesRegex(storage.StorageError, "no objects"):
            storage.fetch("gs://bkt/t/nothing")

    def test_mirror_pushes_and_a_fresh_one_pulls(self):
        mirror = storage.Mirror("gs://bkt/t/mirror", clear=True)
        with open(os.path.join(mirror.local, "metrics.jsonl"), "w") as f:
            f.write('{"step": 1}\n')
        mirror.push(["metrics.jsonl"])
        again = storage.Mirror("gs://bkt/t/mirror", clear=True)
        self.assertFalse(os.path.exists(os.path.join(again.local, "metrics.jsonl")))
        again.pull()
        with open(os.path.join(again.local, "metrics.jsonl")) as f:
            self.assertEqual(f.read(), '{"step": 1}\n')
        # Only what changed since the pull or the last push is uploaded.
        storage.remove("gs://bkt/t/mirror/metrics.jsonl")
        again.push()
        self.assertFalse(storage.exists("gs://bkt/t/mirror/metrics.jsonl"))
        with open(os.path.join(again.local, "metrics.jsonl"), "a") as f:
            f.write('{"step": 2}\n')
        again.push()
        self.assertEqual(storage.read_text("gs://bkt/t/mirror/metrics.jsonl"),
                         '{"step": 1}\n{"step": 2}\n')


if __name__ == "__main__":
    absltest.main()
