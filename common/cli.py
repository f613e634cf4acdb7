"""The one error path of every binary: a `UserError` becomes one `error:` line and exit 1.

Bad input (a missing file, a mesh that cannot shard the model, a checkpoint of
another run, ...) is the user's to fix, so it is reported as a sentence, not a
traceback. Every domain error class subclasses `UserError`; binaries start with
`cli.run(main)` instead of `absl.app.run(main)`. Anything else is a bug and
keeps its traceback.
"""

import functools

from absl import app


class UserError(Exception):
    """Input the user must change; the message says what and where."""


def run(main):
    """absl.app.run(main), printing a UserError as `error: ...` and exiting 1."""

    @functools.wraps(main)
    def guarded(argv):
        try:
            return main(argv)
        except UserError as e:
            raise SystemExit(f"error: {e}") from None

    app.run(guarded)
