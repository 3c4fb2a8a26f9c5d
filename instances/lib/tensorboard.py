"""instances/lib/tensorboard.py: the real TensorBoard of a job, served by the portal itself.

The portal runs TensorBoard's own WSGI application in its web process, one per job, over the
job's log folder: on the simulated cloud a folder under var/, on EC2 the S3 prefix the host's
agent syncs the folder to (TensorBoard reads s3:// through boto3). A job's TensorBoard is built
on its first request and kept, the last PORTAL_TENSORBOARD_APPS of them per process; it reads
new events when a request comes and PORTAL_TENSORBOARD_RELOAD_SECONDS have passed since it last
read (no threads of its own, so forgetting one frees it). The view in front of it
(instances/views/tensorboard.py) decides who may see it: nothing here is reachable without it,
and the only folder one reads is the one the portal names for that job.
"""

from __future__ import annotations

import importlib
import re
import sys
import threading
import time
import types
import warnings
import zipfile
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings

from instances.lib.checkpoints import backup_dir

# The log folder's name in a job's checkpoint location, beside checkpoints/ (not inside it:
# BackupAndRestore deletes its folder when training ends). The agent and the portal both use it.
LOG_FOLDER = "tensorboard"
FONT = re.compile(r"[A-Za-z0-9_-]{1,100}\.woff2")


def logdir_of(checkpoint_uri: str) -> str:
    """Where a job's TensorBoard events are kept for good: the log folder in its checkpoint
    location (an s3:// URI as it is, a file:// one as a local path); "" when it has none."""
    if not checkpoint_uri:
        return ""
    base = checkpoint_uri.rstrip("/")
    if base.startswith("file://"):
        base = backup_dir(base)
    return f"{base}/{LOG_FOLDER}/"


@dataclass
class _Board:
    app: Callable
    multiplexer: object
    logdir: str
    read_at: float = float("-inf")
    lock: threading.Lock = field(default_factory=threading.Lock)

    def refresh(self) -> None:
        """Read what was written since the last read (TensorBoard reads incrementally)."""
        with self.lock:
            if time.monotonic() - self.read_at < settings.PORTAL_TENSORBOARD_RELOAD_SECONDS:
                return
            self.multiplexer.AddRunsFromDirectory(self.logdir)
            self.multiplexer.Reload()
            self.read_at = time.monotonic()


_BOARDS: OrderedDict[tuple[str, str], _Board] = OrderedDict()
_BOARDS_LOCK = threading.Lock()


def _build(logdir: str, path_prefix: str) -> _Board:
    # TensorBoard's own reader, never TensorFlow's, even where TensorFlow is installed (a dev
    # checkout): the module TensorBoard's no-TensorFlow build adds, which makes it use its stub.
    sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))
    with warnings.catch_warnings():
        # TensorBoard 2.18 imports pkg_resources (hence setuptools<81 in pyproject.toml).
        warnings.filterwarnings("ignore", "pkg_resources is deprecated", UserWarning)
        program = importlib.import_module("tensorboard.program")  # not the package's lazy one
        from tensorboard.backend import application
        from tensorboard.backend.event_processing.data_ingester import LocalDataIngester

    board = program.TensorBoard()
    # load_fast=false: the pure-Python reader, in this process (not the Rust data server).
    board.configure(logdir=logdir, path_prefix=path_prefix, load_fast="false", reload_interval=0)
    ingester = LocalDataIngester(board.flags)  # not started: _Board.refresh reads on request
    app = application.TensorBoardWSGIApp(
        board.flags,
        board.plugin_loaders,
        ingester.data_provider,
        board.assets_zip_provider,
        ingester.deprecated_multiplexer,
    )
    return _Board(app=app, multiplexer=ingester.deprecated_multiplexer, logdir=logdir)


def tensorboard_app(*, logdir: str, path_prefix: str) -> Callable:
    """The WSGI application of TensorBoard over ``logdir``, answering under ``path_prefix``,
    with what has been written there read."""
    key = (logdir, path_prefix)
    with _BOARDS_LOCK:
        board = _BOARDS.get(key)
        if board is None:
            board = _BOARDS[key] = _build(logdir, path_prefix)
            while len(_BOARDS) > settings.PORTAL_TENSORBOARD_APPS:
                _BOARDS.popitem(last=False)
        _BOARDS.move_to_end(key)
    board.refresh()
    return board.app


def tensorboard_font(name: str) -> bytes | None:
    """A font of TensorBoard's own assets, which its pages ask for at /font-roboto/<name>
    whatever their prefix; None for a name it does not have."""
    if not FONT.fullmatch(name):
        return None
    from tensorboard import assets

    with zipfile.ZipFile(assets.get_default_assets_zip_provider()()) as bundle:
        try:
            return bundle.read(f"font-roboto/{name}")
        except KeyError:
            return None
