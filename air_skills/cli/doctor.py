"""`air doctor`: reads the pool, the recent infra events and the tracking store, then reports."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from air_skills.gpu.doctor import doctor_report
from air_skills.gpu.providers import provider
from air_skills.runtime.passes import MAX_INFRA_RETRIES
from air_skills.tracking.store_check import check_store

if TYPE_CHECKING:
    from air_skills.client import Client

HISTORY_S = 24 * 3600  # the report looks back one day for restarts and cordons


def run_doctor(client: Client, deep: bool = False) -> dict[str, Any]:
    """The doctor's report for this machine (see ``air_skills.gpu.doctor``)."""
    since = time.time() - HISTORY_S
    return doctor_report(
        provider(),
        client.gpus(),
        client.home,
        requeued_infra=client.store.events_since("requeued-infra", since),
        cordons=client.store.events_since("cordon", since),
        max_infra_retries=MAX_INFRA_RETRIES,
        tracking=check_store(client.home),
        deep=deep,
    )
