"""Dask worker preload for the kill test: the first time this worker starts executing a task, it SIGKILLs
itself (once per marker file, so the nanny's restarted worker lives). Used as ``dask worker --preload``."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from distributed.diagnostics.plugin import WorkerPlugin


class DieOnce(WorkerPlugin):
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def transition(self, key, start, finish, **kwargs) -> None:
        if finish == "executing" and not self.marker.exists():
            self.marker.write_text(str(key))
            os.kill(os.getpid(), signal.SIGKILL)


async def dask_setup(worker) -> None:
    await worker.plugin_add(plugin=DieOnce(Path(os.environ["DIE_ONCE_MARKER"])), name="die-once")
