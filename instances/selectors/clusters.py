"""Clusters, read: what a cluster order may be, and what each node needs to find the others
(TF_CONFIG, its rank, the network variables NCCL reads)."""

from __future__ import annotations

import json
from collections.abc import Callable

from django.conf import settings

from instances.models import Instance, InstanceType, Placement
from instances.providers import provider_class


def order_size_bounds(placement: str) -> tuple[int, int]:
    """The fewest and most hosts one order takes: separate hosts 1 to PORTAL_ORDER_MAX_COUNT, a
    cluster 2 to PORTAL_CLUSTER_MAX_NODES."""
    if placement == Placement.CLUSTER:
        return 2, settings.PORTAL_CLUSTER_MAX_NODES
    return 1, settings.PORTAL_ORDER_MAX_COUNT


def cluster_refusals(
    *,
    project,
    instance_type: InstanceType,
    nodes: int,
    efa: bool | None,
    refuse: Callable[..., None],
) -> bool:
    """Refuse (through order_validate's ``refuse``) what a cluster order cannot be; return
    whether its nodes get EFA (when the order does not say: whether the catalog knows the
    type's EFA interfaces)."""
    least, most = order_size_bounds(Placement.CLUSTER)
    if not least <= nodes <= most:
        refuse(
            "nodes",
            f"A cluster has {least} to {most} nodes; for a single host leave placement out.",
            "out_of_range",
            max=most,
        )
    if efa and not instance_type.efa_interfaces:
        with_efa = InstanceType.objects.offered().filter(efa_interfaces__gt=0)
        names = ", ".join(with_efa.values_list("name", flat=True)) or "none in the catalog"
        refuse(
            "efa",
            f"{instance_type.name} has no EFA interfaces in the catalog; order a type that has "
            f"them ({names}) or leave efa out.",
            "efa_not_offered",
        )
    if project.tenancy == project.Tenancy.HOST:
        refuse(
            "placement",
            f"{project.slug}'s hosts run on the dedicated host {project.host_id}, which takes no "
            "placement group; order separate hosts.",
            "cluster_not_on_dedicated_host",
        )
    return instance_type.efa_interfaces > 0 if efa is None else bool(efa)


def order_efa_interfaces(order) -> int:
    """How many EFA interfaces each of the order's hosts gets: the type's, on a cluster that
    asked for EFA; none otherwise."""
    return order.instance_type.efa_interfaces if order.efa else 0


def cluster_members(order_ids) -> dict:
    """Each cluster's current node of every rank (the newest host of the rank that is live,
    else its newest), by order id, in rank order: one query for any number of clusters."""
    members: dict = {}
    rows = (
        Instance.objects.filter(order_id__in=set(order_ids), rank__isnull=False)
        .select_related("order", "instance_type")
        .order_by("order_id", "rank", "-created_at", "id")
    )
    for node in rows:
        ranks = members.setdefault(node.order_id, {})
        kept = ranks.get(node.rank)
        if kept is None or (not kept.is_live and node.is_live):
            ranks[node.rank] = node
    return {
        order_id: [ranks[rank] for rank in sorted(ranks)] for order_id, ranks in members.items()
    }


def cluster_endpoints(members: list[Instance]) -> list[str | None]:
    """Where each node's worker listens (host:port), None for a node without an address yet."""
    cloud = provider_class()
    return [
        cloud.cluster_endpoint(private_ip=member.private_ip, instance_id=str(member.pk))
        if member.private_ip
        else None
        for member in members
    ]


def cluster_tf_config(node: Instance, members: list[Instance]) -> dict | None:
    """TF_CONFIG for ``node``, as MultiWorkerMirroredStrategy reads it: every worker's address
    in rank order and this node's index. None until every node runs with an address."""
    if node.rank is None or len(members) != node.order.count:
        return None
    if any(member.status != Instance.Status.RUNNING for member in members):
        return None
    workers = cluster_endpoints(members)
    if None in workers:
        return None
    return _tf_config(workers, node.rank)


def _tf_config(workers: list[str], index: int) -> dict:
    return {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}


# The GPUs whose EFA hosts (p4d, p4de, p5, p5e and their kin) read GPU memory over the network
# directly (GPUDirect RDMA); EFA on the others (g5.48xlarge's A10G) goes through host memory.
GPUDIRECT_RDMA_GPUS = frozenset({"A100", "A800", "H100", "H800", "H200", "B200"})


def network_environment(instance_type: InstanceType, *, efa: bool) -> dict[str, str]:
    """The variables NCCL needs on a cluster node of this type: EFA through libfabric's efa
    provider (with GPUDirect RDMA where the GPU has it), else TCP
    sockets on every interface but loopback and docker's."""
    if not efa:
        return {"NCCL_SOCKET_IFNAME": "^lo,docker"}
    variables = {"FI_PROVIDER": "efa", "FI_EFA_FORK_SAFE": "1", "NCCL_SOCKET_IFNAME": "^lo,docker"}
    if instance_type.gpu_model in GPUDIRECT_RDMA_GPUS:
        variables["FI_EFA_USE_DEVICE_RDMA"] = "1"
    return variables


def cluster_environment(node: Instance, members: list[Instance]) -> dict[str, str]:
    """What a cluster node's job (and the host page, for a login shell) exports: TF_CONFIG,
    the rank and size, and the network variables. Empty until the cluster runs whole."""
    tf_config = cluster_tf_config(node, members)
    return {} if tf_config is None else _environment(node, tf_config, len(members))


def run_cluster_environment(rank: int, hosts: list[Instance]) -> dict[str, str]:
    """The same variables for rank ``rank`` of a cluster job's run, whose nodes ``hosts`` (in
    rank order) were fixed when the run was handed out: the run keeps them to its end, whatever
    becomes of the nodes since."""
    workers = [endpoint or "" for endpoint in cluster_endpoints(hosts)]
    return _environment(hosts[rank], _tf_config(workers, rank), len(hosts))


def _environment(node: Instance, tf_config: dict, size: int) -> dict[str, str]:
    return {
        "TF_CONFIG": json.dumps(tf_config, separators=(",", ":")),
        "PORTAL_CLUSTER_RANK": str(tf_config["task"]["index"]),
        "PORTAL_CLUSTER_SIZE": str(size),
        **network_environment(node.instance_type, efa=node.order.efa),
    }
