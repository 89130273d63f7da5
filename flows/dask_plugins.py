"""Dask plugins for the LocalCluster that ``flows.runtime.dask_client`` starts (a module of its own: workers
unpickle a plugin by importing its class, and ``flows.runtime`` imports distributed only when a cluster starts)."""

from __future__ import annotations

import logging
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin


class QuietWorker(WorkerPlugin):
    """Our LocalCluster's workers log only CRITICAL. On a busy machine a worker misses a heartbeat, or is killed
    mid-heartbeat at close, and prints a traceback although the run succeeds. A task's own error still reaches the
    client, and a dead worker is still reported by its nanny in the calling process. A scheduler address given by
    the user is left alone: its workers are theirs."""

    idempotent = True

    def setup(self, worker: Any) -> None:
        logging.getLogger("distributed").setLevel(logging.CRITICAL)
