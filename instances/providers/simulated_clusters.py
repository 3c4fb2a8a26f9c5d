"""The simulated cloud's clusters (mixed into SimulatedProvider): a cluster's nodes are created
in one transaction, all or none, in one zone, as EC2 launches a cluster in one RunInstances call
with MinCount = MaxCount; and its nodes' TensorFlow workers listen on loopback, since their
agents run on this machine."""

from __future__ import annotations

import uuid
from dataclasses import replace

from django.db import IntegrityError, transaction

from instances.models import SimulatedHost
from instances.providers.base import (
    TAG_CLUSTER,
    CloudHost,
    ClusterLaunch,
    LaunchRequest,
    ProviderTransientError,
    launch_tags,
)

# Where the simulated cloud's cluster nodes listen: a port of their own on this machine, drawn
# from the node's id in a range no other service of the portal uses, and below Linux's
# ephemeral ports (32768 and up, /proc/sys/net/ipv4/ip_local_port_range), which any outgoing
# connection (to the database, to Redis) or port-0 listener may hold when a worker binds.
ENDPOINT_PORTS = range(20000, 32768)


class SimulatedClusters:
    """Launching a cluster on the simulated cloud. Tokens are always honoured here: the
    cluster's launch is one transaction, so a repeat finds every node or none."""

    def launch_cluster(self, cluster: ClusterLaunch) -> list[CloudHost]:
        lost = self._call()
        return self._reply(lost, self._launch_cluster(cluster))

    def _launch_cluster(self, cluster: ClusterLaunch) -> list[CloudHost]:
        nodes = [
            replace(
                request,
                tags=launch_tags(request) | {TAG_CLUSTER: cluster.cluster_id},
                # One zone for the whole cluster: a placement group lives in one.
                avoid_zone=cluster.nodes[0].avoid_zone,
            )
            for request in cluster.nodes
        ]
        for _ in range(8):
            launched = self._cluster_nodes(nodes)
            if launched is not None:
                return launched
            self._capacity_for(nodes[0], hosts=len(nodes))
            try:
                with transaction.atomic():
                    rows = [
                        self._create(
                            request, key=request.client_token, digest=self._digest(request)
                        )
                        for request in nodes
                    ]
                return [self._host(row) for row in rows]
            except IntegrityError:
                # The same cluster launched by another worker meanwhile (found next round),
                # or an address drawn twice: the next round draws again.
                continue
        raise ProviderTransientError(
            "The cluster launch collided with others; try again.", code="InternalError"
        )

    def _cluster_nodes(self, nodes: list[LaunchRequest]) -> list[CloudHost] | None:
        """The hosts an earlier launch of these nodes made (all of them, in rank order), or
        None when it made none."""
        rows = {
            row.client_token: row
            for row in SimulatedHost.objects.filter(
                client_token__in=[request.client_token for request in nodes]
            )
        }
        if not rows:
            return None
        if len(rows) < len(nodes):
            # Never left by this cloud (one transaction makes them all), but never answered as
            # if whole either.
            raise ProviderTransientError(
                f"Only {len(rows)} of the cluster's {len(nodes)} nodes exist.",
                code="InternalError",
            )
        return [
            self._same_token(rows[request.client_token], self._digest(request)) for request in nodes
        ]

    @classmethod
    def cluster_endpoint(cls, *, private_ip: str, instance_id: str) -> str:
        port = ENDPOINT_PORTS.start + uuid.UUID(str(instance_id)).int % len(ENDPOINT_PORTS)
        return f"127.0.0.1:{port}"
