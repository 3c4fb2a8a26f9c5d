"""Clusters: an order's nodes, each with its rank, which run whole or not at all: a launch that
fails fails every node, a cluster that loses a node before it ran whole is ended, and what the
cloud still holds for a cluster with no node left is given back. The launch itself, all nodes in
one call, is the worker's (instances/services/cloud.py cluster_provision); what a cluster order
may be, and what the nodes need to find each other (TF_CONFIG), are read in
instances/selectors/clusters.py."""

from __future__ import annotations

import logging

from django.db.models import Q

from instances.lib.ids import is_uuid
from instances.models import TASK_OF_STATUS, Instance, Job, Order, Placement
from instances.providers.base import CloudHost, Provider
from instances.services.queue import enqueue
from instances.services.transitions import (
    audit_change,
    instance_transition,
)
from portal.models import Notice
from portal.services import notice_send

log = logging.getLogger(__name__)

ACTOR = "system:provision"
WHOLE_OR_NOT_AT_ALL = "a cluster runs whole or not at all"
WHOLE_AGAIN = "cluster-whole-again"
# A node in one of these may still be (or become) part of a running cluster.
LAUNCHABLE = Instance.LIVE - {Instance.Status.TERMINATING}


def cluster_first_nodes(order: Order) -> list[Instance]:
    """The nodes the cluster was launched with (not their replacements), by rank."""
    return list(
        Instance.objects.with_detail()
        .filter(order=order, rank__isnull=False, replaces__isnull=True)
        .order_by("rank")
    )


def cluster_fail_unlaunched(nodes: list[Instance], *, because: Instance) -> None:
    """A node ended before its cluster launched: every node not yet launched fails."""
    for node in nodes:
        if node.status in (Instance.Status.REQUESTED, Instance.Status.PROVISIONING):
            instance_transition(
                instance=node,
                to=Instance.Status.FAILED,
                reason=f"{because.name} of its cluster {because.get_status_display().lower()} "
                f"before the cluster launched; {WHOLE_OR_NOT_AT_ALL}",
                actor=ACTOR,
            )


def cluster_fail(*, instance: Instance, reason: str) -> None:
    """A cluster's launch failed: every node not yet launched fails with it. A node another
    worker's launch has recorded a host for is left to it (and to clusters_partial_end, if
    its cluster cannot be whole)."""
    for node in cluster_first_nodes(instance.order):
        if node.cloud_id is None and node.status in (
            Instance.Status.REQUESTED,
            Instance.Status.PROVISIONING,
        ):
            instance_transition(
                instance=node, to=Instance.Status.FAILED, reason=reason, actor=ACTOR
            )


def clusters_partial_end(*, actor: str) -> list[str]:
    """End every cluster that lost a node before it ever ran whole: a first node that ended
    without ever running (the cloud ended it while it booted, it was cancelled while the
    launch was half recorded) leaves the others nothing to train with. Their live nodes go to
    terminating. Returns their ids."""
    broken = (
        Instance.objects.filter(
            order__placement=Placement.CLUSTER,
            replaces__isnull=True,
            lease_started_at__isnull=True,
        )
        .exclude(status__in=Instance.LIVE)
        .values_list("order_id", flat=True)
        .distinct()
    )
    ended = []
    for node in Instance.objects.filter(
        Q(order_id__in=broken), status__in=LAUNCHABLE
    ).with_detail():
        node, changed = instance_transition(
            instance=node,
            to=Instance.Status.TERMINATING,
            reason=f"a node of its cluster ended before the cluster ran; {WHOLE_OR_NOT_AT_ALL}",
            actor=actor,
        )
        if changed:
            enqueue(TASK_OF_STATUS[Instance.Status.TERMINATING], str(node.pk))
            ended.append(str(node.pk))
    return ended


def cluster_node_ids(hosts: list[CloudHost]) -> dict[str, str]:
    """The node each cluster host without its node's tag belongs to (its cluster's node of its
    launch index), by cloud id: a worker that died between the launch and the tagging left
    them so. One query for any number of them."""
    untagged = [
        h for h in hosts if not h.instance_uuid and h.cluster_id and h.launch_index is not None
    ]
    if not untagged:
        return {}
    wanted = Q()
    for host in untagged:
        if is_uuid(host.cluster_id):
            wanted |= Q(order_id=host.cluster_id, rank=host.launch_index)
    if not wanted:
        return {}
    rows = {
        (str(order_id), rank): str(pk)
        for pk, order_id, rank in Instance.objects.filter(
            wanted, replaces__isnull=True
        ).values_list("pk", "order_id", "rank")
    }
    return {
        host.cloud_id: rows[(host.cluster_id, host.launch_index)]
        for host in untagged
        if (host.cluster_id, host.launch_index) in rows
    }


def clusters_release(*, provider: Provider, actor: str) -> list[str]:
    """Delete what the cloud still holds for clusters that no longer run a node (EC2: their
    placement group and security group). A cluster still launching has live nodes and keeps
    its groups. Returns the clusters released."""
    leftovers = provider.cluster_leftovers()
    if not leftovers:
        return []
    busy = {
        str(order_id)
        for order_id in Instance.objects.filter(
            order_id__in=[cluster for cluster in leftovers if is_uuid(cluster)],
            status__in=Instance.LIVE,
        ).values_list("order_id", flat=True)
    }
    released = []
    for cluster in sorted(leftovers - busy):
        if provider.release_cluster(cluster):
            audit_change(
                actor,
                action="release-cluster",
                object_ref=f"order:{cluster}",
                reason="no node of the cluster runs: its placement and security groups deleted",
            )
            released.append(cluster)
    return released


def cluster_node_back(*, node: Instance) -> None:
    """A replacement node runs: when every rank of its cluster runs again, its owner hears
    that the cluster is whole, with the new TF_CONFIG on each node's page."""
    if node.rank is None or node.replaces_id is None:
        return
    ranks = set(
        Instance.objects.filter(
            order_id=node.order_id, rank__isnull=False, status=Instance.Status.RUNNING
        ).values_list("rank", flat=True)
    )
    size = node.order.count
    link, topic = f"/hosts/{node.pk}/", f"{WHOLE_AGAIN}:{node.pk}"
    if ranks != set(range(size)) or Notice.objects.filter(topic=topic).exists():
        return  # not whole yet, or already said (two workers saw the node run)
    job = Job.objects.filter(order_id=node.order_id).only("pk", "name").first()
    if job is not None:
        # The portal hands the job's next run to every node itself: a worker started by hand
        # would train beside it.
        link = f"/jobs/{job.pk}/"
        then = (
            f"Job {job.name}'s next run starts on every node with the new TF_CONFIG and resumes "
            "from its checkpoint; there is nothing to restart."
        )
    else:
        then = (
            "TF_CONFIG names it now: restart your workers on every node (the export lines are "
            "on each node's page) and they resume from the checkpoint."
        )
    notice_send(
        user=node.owner,
        subject=f"Cluster whole again: {size}× {node.instance_type.name} in {node.project.slug}",
        body=f"{node.name} runs as rank {node.rank} in place of the node the cloud took back. "
        + then,
        link=link,
        topic=topic,
    )
