"""Where both stacks' step metrics go beside metrics.jsonl: TensorBoard always,
Weights & Biases when the config asks for it.

    --config.tracking.report_to=tensorboard,wandb --config.tracking.project=gemma4-sft
    WANDB_MODE=offline ...     # or --config.tracking.wandb_mode=offline: a local
                               # run in RUN_DIR/wandb/ that `wandb sync` uploads later

Every tracker gets the same scalars under the same names, at the optimizer
step: "train/" + NAME for each of run_dir.METRIC_NAMES but `step`, and "eval/" +
"loss" and "tokens" for a validation record. W&B also gets the resolved config and keeps one run per run
directory: its id is kept in RUN_DIR/tracking.json, so a resumed run continues
it. Only the main process logs.
"""

import netrc
import os
import urllib.parse
import uuid

from common import cli
from common import run_dir
from common import storage

TRACKERS = ("tensorboard", "wandb")
WANDB = "wandb"  # RUN_DIR/wandb/: W&B's own files (an offline run, logs)
STATE = "tracking.json"  # RUN_DIR/tracking.json: the W&B run id


class TrackingError(cli.UserError):
    """A tracker the config names cannot be used."""


def requested(tracking):
    """The trackers a config's `tracking` section names (TensorBoard always)."""
    names = [n.strip() for n in (tracking.report_to if tracking else "").split(",") if n.strip()]
    unknown = sorted(set(names) - set(TRACKERS))
    if unknown:
        raise TrackingError(f"tracking.report_to names {', '.join(unknown)}: the trackers "
                            f"are {', '.join(TRACKERS)} (comma-separated)")
    return ["tensorboard", *(n for n in TRACKERS[1:] if n in names)]


def check(config):
    """Fails at start, before any work, when a requested tracker cannot be imported
    or is set up wrongly."""
    tracking = config.get("tracking")
    if WANDB in requested(tracking):
        _import_wandb()
        if tracking.wandb_mode not in ("", "online", "offline"):
            raise TrackingError(f"tracking.wandb_mode must be online, offline or empty "
                                f"(W&B's default), got {tracking.wandb_mode!r}")
        mode = tracking.wandb_mode or os.environ.get("WANDB_MODE", "online")
        if mode == "online" and not _wandb_credentials():
            raise TrackingError(
                "tracking.report_to names wandb, online, but this host has no W&B "
                "credentials (WANDB_API_KEY, or `wandb login`'s entry in ~/.netrc): log in, "
                "or log offline with --config.tracking.wandb_mode=offline and upload later "
                "with `wandb sync`")


def _wandb_credentials():
    """Whether W&B can authenticate without asking: a key or identity token in the
    environment, or a netrc entry for its host (where `wandb login` saves the key)."""
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    host = urllib.parse.urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai"))
    path = os.environ.get("NETRC") or os.path.join(os.path.expanduser("~"), ".netrc")
    try:
        return netrc.netrc(path).authenticators(host.hostname or "") is not None
    except (OSError, netrc.NetrcParseError):
        return False


def _import_wandb():
    try:
        import wandb  # pylint: disable=import-outside-toplevel
    except ImportError:
        raise TrackingError(
            "tracking.report_to names wandb but the wandb package is not installed in this "
            "environment: `pip install wandb`, or drop wandb from tracking.report_to") from None
    return wandb


class TensorBoard:
    def __init__(self, local_dir):
        from tensorboardX import SummaryWriter  # pylint: disable=import-outside-toplevel
        self._writer = SummaryWriter(os.path.join(local_dir, run_dir.TENSORBOARD))

    def log(self, scalars, step):
        for name, value in scalars.items():
            self._writer.add_scalar(name, value, step)

    def flush(self):
        self._writer.flush()

    def close(self):
        self._writer.close()


class Wandb:
    """One W&B run per run directory, resumed with it."""

    def __init__(self, tracking, config, local_dir, run_name):
        self._wandb = wandb = _import_wandb()
        state_path = os.path.join(local_dir, STATE)
        state = storage.read_json(state_path) if os.path.exists(state_path) else {}
        if not state.get("wandb_run_id"):
            state["wandb_run_id"] = uuid.uuid4().hex[:12]
            storage.write_json(state_path, state)
        try:
            self._run = wandb.init(
                project=tracking.project, entity=tracking.entity or None,
                name=tracking.run_name or run_name, tags=list(tracking.tags) or None,
                config=config.to_dict(), dir=local_dir, id=state["wandb_run_id"],
                resume="allow", mode=tracking.wandb_mode or None)
        except Exception as e:  # pylint: disable=broad-except  # W&B's errors vary by cause
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise TrackingError(
                f"W&B could not start a run ({first}): log in on this host (`wandb login`, "
                "or WANDB_API_KEY), or log offline with --config.tracking.wandb_mode=offline "
                "and upload later with `wandb sync`") from None

    def log(self, scalars, step):
        self._run.log(dict(scalars), step=step)

    def flush(self):
        pass  # W&B's service writes (or uploads) as it goes

    def close(self):
        self._run.finish()
        self._wandb.teardown()  # stops W&B's service process now, not at exit


def open_trackers(config, local_dir, run_name):
    """The trackers of `config` (None: TensorBoard alone), writing under local_dir."""
    tracking = config.get("tracking") if config is not None else None
    trackers = [TensorBoard(local_dir)]
    if WANDB in requested(tracking):
        trackers.append(Wandb(tracking, config, local_dir, run_name))
    return trackers
