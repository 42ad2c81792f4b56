"""What a Ray cluster offers (nodes, GPUs, CPUs, use), read from its dashboard's REST API."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from air_skills.backends.ray.sdk import forget, is_connection_error, unavailable


def _local_ips() -> set[str]:
    ips = {"127.0.0.1", "::1", "localhost"}
    try:
        import psutil

        for addrs in psutil.net_if_addrs().values():
            ips.update(a.address.split("%")[0] for a in addrs)
    except Exception:
        pass
    return ips


@dataclass
class ClusterView:
    """What the cluster offers, read from the dashboard's REST API (no ray.init needed)."""

    address: str
    nodes: list[dict[str, Any]] = field(default_factory=list)  # ALIVE nodes
    used: dict[str, float] = field(default_factory=dict)  # from the autoscaler's report
    known: bool = True  # False when the dashboard would not say

    def total(self, resource: str) -> float:
        return sum(n.get("resources_total", {}).get(resource, 0.0) for n in self.nodes)

    def largest_node(self, resource: str) -> float:
        return max((n.get("resources_total", {}).get(resource, 0.0) for n in self.nodes), default=0)

    def free(self, resource: str) -> float | None:
        if resource not in self.used:
            return None
        return max(0.0, self.total(resource) - self.used[resource])

    @property
    def on_this_host(self) -> bool:
        host = urlsplit(self.address).hostname or ""
        ips = _local_ips()
        if self.nodes:
            return all(n.get("node_ip") in ips for n in self.nodes)
        return host in ips

    def describe(self) -> str:
        if not self.known:
            return "resources unknown (the dashboard's state API did not answer)"
        gib = self.total("memory") / 2**30
        per_node = ", ".join(
            f"{int(n.get('resources_total', {}).get('GPU', 0))}" for n in self.nodes[:8]
        )
        more = ", ..." if len(self.nodes) > 8 else ""
        return (
            f"{len(self.nodes)} node(s): {num(self.total('CPU'))} CPU, "
            f"{num(self.total('GPU'))} GPU (per node: {per_node}{more}), {gib:.1f} GiB memory"
        )


def num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def cluster_view(client: Any) -> ClusterView:
    address = client.get_address()
    view = ClusterView(address=address)
    try:
        r = client._do_request("GET", "/api/v0/nodes?detail=1&limit=10000")
        nodes = r.json()["data"]["result"]["result"] if r.status_code == 200 else None
    except Exception as exc:
        if is_connection_error(exc):
            forget(client)
            raise unavailable(address, exc) from None
        nodes = None
    if nodes is None:
        view.known = False
        return view
    view.nodes = [n for n in nodes if n.get("state") == "ALIVE"]
    with contextlib.suppress(Exception):
        r = client._do_request("GET", "/api/cluster_status")
        usage = r.json()["data"]["clusterStatus"]["loadMetricsReport"]["usage"]
        view.used = {k: float(v[0]) for k, v in usage.items() if isinstance(v, list) and v}
    return view
