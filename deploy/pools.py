"""deploy/start.sh's setup of a running Prefect server in one process (six `prefect` CLI calls took ~18 s, each
paying the CLI's start-up): the work pools "cpu" and "gpu" (type process, with Prefect's default job template, as
`prefect work-pool create --type process` makes them) when missing, and the global concurrency limit "gpu" with
SLOTS slots, created or set. Usage: PREFECT_API_URL=... python deploy/pools.py SLOTS"""

from __future__ import annotations

import sys

from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import WorkPoolCreate
from prefect.exceptions import ObjectNotFound
from prefect.workers.process import ProcessWorker


def ensure(slots: int) -> None:
    with get_client(sync_client=True) as client:
        for name in ("cpu", "gpu"):
            try:
                client.read_work_pool(name)
            except ObjectNotFound:
                client.create_work_pool(WorkPoolCreate(
                    name=name, type="process", base_job_template=ProcessWorker.get_default_base_job_template()))
        client.upsert_global_concurrency_limit_by_name("gpu", slots)


if __name__ == "__main__":
    ensure(int(sys.argv[1]))
