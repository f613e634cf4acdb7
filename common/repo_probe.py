"""A binary for tests to start: prints, as JSON, the code root its own launcher
gave it and the arguments it received, then exits with the code in
$REPO_PROBE_EXIT (0 without it)."""

import json
import os
import sys

from common import repo

if __name__ == "__main__":
    print(json.dumps({"code_root": repo.code_root(), "argv": sys.argv[1:]}))
    sys.exit(int(os.environ.get("REPO_PROBE_EXIT", "0")))
