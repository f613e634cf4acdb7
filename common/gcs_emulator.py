"""A Cloud Storage API emulator on loopback, for the tests of gs:// locations.

    with gcs_emulator.running("bkt") as url:   # STORAGE_EMULATOR_HOST=url meanwhile
        ... gs://bkt/... reads and writes go to the emulator ...

It is `gcp-storage-emulator` from PyPI, in a process of its own, bound to
127.0.0.1 on a port the system picks; its objects live in a temporary folder
removed afterwards. Its reads are given the generation header real GCS sends
(tensorstore needs it); it does not enforce preconditions (ifGenerationMatch),
so it proves where objects go, not how concurrent writers race. The variable is set in this process's environment, so the
binaries a test starts inherit it; common/storage.py points tensorstore (Orbax)
and gcsfs at it.
"""

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile

from common import binaries

_SERVE = """
import sys, time
from gcp_storage_emulator import server as emulator
from gcp_storage_emulator.handlers import objects

def with_generation(handler):
    # Real GCS names an object's generation in the x-goog-generation header of
    # every read; tensorstore (Orbax's arrays) needs it for its conditional
    # writes, and this emulator leaves it out.
    def handle(request, response, storage, *args, **kwargs):
        handler(request, response, storage, *args, **kwargs)
        try:
            obj = storage.get_file_obj(request.params["bucket_name"],
                                       request.params["object_id"])
        except Exception:  # no such object: the handler answered 404
            return
        response["x-goog-generation"] = obj["generation"]
        response["x-goog-metageneration"] = obj["metageneration"]
    return handle

for _, methods in emulator.HANDLERS:
    if methods.get("GET") in (objects.get, objects.download):
        methods["GET"] = with_generation(methods["GET"])
server = emulator.create_server("127.0.0.1", 0, in_memory=False,
                                default_bucket=sys.argv[1], data_dir=sys.argv[2])
server.start()
print(server._api._httpd.server_address[1], flush=True)
while True:
    time.sleep(3600)
"""

_VARIABLES = ("STORAGE_EMULATOR_HOST", "TENSORSTORE_GCS_HTTP_URL",
              "GOOGLE_AUTH_TOKEN_FOR_TESTING", "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT")


@contextlib.contextmanager
def running(bucket):
    """Runs the emulator with `bucket` created; yields its http://127.0.0.1:PORT."""
    data_dir = tempfile.mkdtemp(prefix="gcs-emulator-")
    # The emulator's own packages are this target's deps: the interpreter gets its path.
    process = subprocess.Popen([sys.executable, "-c", _SERVE, bucket, data_dir],
                               env=binaries.this_interpreter_env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    saved = {name: os.environ.get(name) for name in _VARIABLES}
    try:
        port = process.stdout.readline().strip()
        if not port.isdigit():
            raise RuntimeError(f"the GCS emulator did not start (exit {process.poll()})")
        url = f"http://127.0.0.1:{port}"
        for name in _VARIABLES:
            os.environ.pop(name, None)
        os.environ["STORAGE_EMULATOR_HOST"] = url
        yield url
    finally:
        process.kill()
        process.wait()
        process.stdout.close()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        shutil.rmtree(data_dir, ignore_errors=True)
