"""A binary for binaries_test to start: prints, as JSON, the code root its own
launcher gave it and the arguments it received."""

import json
import sys

from common import repo

if __name__ == "__main__":
    print(json.dumps({"code_root": repo.code_root(), "argv": sys.argv[1:]}))
