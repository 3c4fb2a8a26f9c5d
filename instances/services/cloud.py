"""The worker side: talk to the cloud, then record what it said."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from instances.lib.checkpoints import host_environment
from instances.models import Instance, Job, Order
from instances.providers import get_provider
from instances.providers.base import (
    NO_CAPACITY,
    TAG_CLUSTER,
    TAG_INSTANCE,
    TAG_OWNER,
    TAG_PROJECT,
    CloudHost,
    CloudState,
    ClusterLaunch,
    Isolation,
    LaunchRequest,
    Provider,
    cluster_group_name,
)
from instances.selectors.clusters import order_efa_interfaces
from instances.selectors.hosts import instance_load
from instances.services.clusters import (
    LAUNCHABLE,
    WHOLE_OR_NOT_AT_ALL,
    cluster_fail,
    cluster_fail_unlaunched,
    cluster_first_nodes,
    cluster_node_back,
)
from instances.services.mig import mig_slice_end, mig_slice_provision
from instances.services.notebooks import notebook_login
from instances.services.spot_recovery import instance_interrupted, interrupted_host_gone
from instances.services.telemetry import agent_credential_issue, agent_secret
from instances.services.transitions import instance_note, instance_transition, instance_walk

log = logging.getLogger(__name__)

PROVISION_ACTOR = "system:provision"


# --- the worker side: talk to the cloud, then record what it said ----------------------------

# Sentences a researcher can act on, by cloud error code.
FAILURE_ADVICE = {
    NO_CAPACITY: (
        "The cloud has no free {type} capacity in {region} right now. Try again later, another "
        "instance type, or the other market."
    ),
    "InvalidAMIID.NotFound": "The image {image} does not exist in {region}; an admin must fix it.",
    "SpotMaxPriceTooLow": "Your maximum spot price is below the spot price; order again higher.",
    "IdempotentParameterMismatch": "The cloud saw a different launch under this host's token.",
}


def failure_reason(instance: Instance, error: Exception, *, attempts: int | None = None) -> str:
    code = getattr(error, "code", "")
    advice = FAILURE_ADVICE.get(code, "The cloud refused the launch.")
    text = advice.format(
        type=instance.instance_type.name, region=instance.region, image=instance.image.name
    )
    if attempts:
        text += f" (gave up after {attempts} attempts)"
    return f"{text} [{code or type(error).__name__}: {error}]"


def launch_isolation(project) -> Isolation:
    """Where a project's hosts run and what guards them (Project.isolation_in_effect)."""
    values = project.isolation_in_effect()
    return Isolation(
        **values
        | {
            "subnet_ids": tuple(values["subnet_ids"]),
            "security_group_ids": tuple(values["security_group_ids"]),
        }
    )


def host_isolation(isolation: Isolation, host: CloudHost) -> dict:
    """What a host's page says of where it runs: the subnet the cloud chose, and what the
    launch asked for of the rest (EC2 refuses a launch it cannot honour, never downgrades it)."""
    return {
        "subnet_id": host.subnet_id,
        "security_group_ids": list(isolation.security_group_ids),
        "kms_key_id": isolation.kms_key_id,
        "tenancy": isolation.tenancy,
        "host_id": isolation.host_id,
        "instance_profile": isolation.instance_profile,
    } | ({"placement_group": isolation.placement_group} if isolation.placement_group else {})


def launch_request(instance: Instance) -> LaunchRequest:
    order = instance.order
    avoid_zone = zone = ""
    isolation = launch_isolation(instance.project)
    tags = {
        TAG_INSTANCE: str(instance.id),
        TAG_PROJECT: instance.project.slug,
        TAG_OWNER: instance.owner.username,
    }
    if instance.rank is not None:
        # A cluster's node, first or replacement, joins the cluster's placement group, which
        # lives in one zone: a replacement goes where its cluster runs.
        tags[TAG_CLUSTER] = str(order.pk)
        isolation = replace(isolation, placement_group=cluster_group_name(str(order.pk)))
        if instance.replaces_id:
            zone = (
                Instance.objects.filter(order_id=order.pk)
                .exclude(pk=instance.pk)
                .exclude(availability_zone="")
                .values_list("availability_zone", flat=True)
                .first()
                or ""
            )
    elif instance.replaces_id:
        # The zone whose spot capacity was just taken back is the worst place to look for more.
        replaced = Instance.objects.filter(pk=instance.replaces_id)
        avoid_zone = replaced.values_list("availability_zone", flat=True).first() or ""
    return LaunchRequest(
        client_token=instance.client_token,
        instance_uuid=str(instance.id),
        instance_type=instance.instance_type.name,
        image_id=instance.image.image_id_for(instance.region) or "",
        market=instance.market,
        ssh_public_key=order.ssh_public_key,
        max_spot_price=order.max_spot_price,
        agent_token=agent_secret(instance),
        tags=tags,
        environment=host_environment(order.checkpoint_uri),
        avoid_zone=avoid_zone,
        runs_job=Job.objects.filter(order_id=instance.order_id).exists(),
        isolation=isolation,
        notebook_user=notebook_login(instance.image),
        efa_interfaces=order_efa_interfaces(order),
        zone=zone,
    )


def launch_order_key(host: CloudHost) -> tuple:
    """Which of several hosts of one instance is kept: the earliest launched, as the
    provisioner picks it (instance_provision), so that both choose the same one."""
    return (host.launched_at, host.cloud_id)


def instance_record_host(instance: Instance, host: CloudHost) -> bool:
    """Keep the cloud's identity and addresses of the host on the row (not a status change).
    False when the row already belongs to another host (a double): that host says nothing
    about this row."""
    fields = {
        "availability_zone": host.availability_zone,
        "private_ip": host.private_ip,
        "public_ip": host.public_ip,
        "launched_at": host.launched_at,
    }
    if host.state not in CloudState.GONE:
        fields["last_seen_at"] = timezone.now()
    rows = Instance.objects.filter(pk=instance.pk)
    if instance.cloud_id is None:
        # Conditional: of two workers recording two hosts, the first wins and the other
        # host becomes a double for reconcile to end.
        if not rows.filter(cloud_id__isnull=True).update(cloud_id=host.cloud_id, **fields):
            instance.refresh_from_db()
            return instance.cloud_id == host.cloud_id
        instance.cloud_id = host.cloud_id
    elif instance.cloud_id != host.cloud_id:
        return False
    else:
        rows.update(**fields)
    for name, value in fields.items():
        setattr(instance, name, value)
    return True


def instance_apply_cloud(*, instance: Instance, host: CloudHost | None, actor: str) -> Instance:
    """Bring the row in step with what the cloud reports, at the cloud's own times."""
    S = Instance.Status
    if host is None:
        seen = instance.last_seen_at or instance.launched_at or instance.status_changed_at
        grace = timedelta(seconds=settings.PORTAL_GHOST_GRACE_SECONDS)
        # EC2's describe is eventually consistent: a host launched a moment ago may not be
        # listed yet. Only a host missing for longer than the grace is a ghost.
        if instance.cloud_id and instance.is_live and seen < timezone.now() - grace:
            # A ghost: live here, unknown to the cloud. It ended no later than we last saw it.
            return instance_walk(
                instance,
                [S.TERMINATED],
                reason="the cloud no longer knows this host",
                actor=actor,
                at=instance.last_seen_at or seen,
            )
        return instance
    if not instance_record_host(instance, host):
        return instance
    at, state = host.state_changed_at, host.state
    why = f"cloud reports {state}" + (f" ({host.state_reason})" if host.state_reason else "")
    if state == CloudState.TERMINATED:
        if instance.status == S.PROVISIONING:
            return instance_walk(
                instance,
                [S.FAILED],
                reason=f"the host ended before it ran: {why}",
                actor=actor,
                at=at,
            )
        if host.spot_interrupted and instance.status in (S.RUNNING, S.INTERRUPTED):
            first = instance.status == S.RUNNING
            instance = instance_walk(
                instance,
                [S.INTERRUPTED, S.TERMINATED],
                reason=f"spot capacity reclaimed by the cloud: {why}",
                actor=actor,
                at=at,
            )
            if first:
                # The owner hears at once, and the order's policy starts its replacement
                # now if the warning did not.
                instance_interrupted(instance=instance)
            else:
                # Seen interrupted while shutting down, now gone: it counts no more.
                interrupted_host_gone(instance=instance)
            return instance
        return instance_walk(instance, [S.TERMINATED], reason=why, actor=actor, at=at)
    if state == CloudState.SHUTTING_DOWN:
        if host.spot_interrupted and instance.status == S.RUNNING:
            # EC2 shows an interrupted spot host shutting down before it is gone: it is
            # interrupted now (the owner hears, the replacement starts); terminated later.
            # Only the worker whose move it was acts (two reconciles may race here).
            instance, moved = instance_transition(
                instance=instance,
                to=S.INTERRUPTED,
                reason=f"spot capacity reclaimed by the cloud: {why}",
                actor=actor,
                at=at,
            )
            if moved:
                instance_interrupted(instance=instance)
            return instance
        if instance.status == S.INTERRUPTED:
            return instance
        return instance_walk(instance, [S.TERMINATING], reason=why, actor=actor, at=at)
    if state == CloudState.RUNNING:
        if instance.status == S.STOPPED:
            return instance_walk(instance, [S.STARTING, S.RUNNING], reason=why, actor=actor, at=at)
        if instance.status in (S.PROVISIONING, S.STARTING):
            before = instance.status
            instance = instance_walk(instance, [S.RUNNING], reason=why, actor=actor, at=at)
            if before == S.PROVISIONING and instance.status == S.RUNNING:
                cluster_node_back(node=instance)
            return instance
        return instance
    if state == CloudState.STOPPED:
        if instance.status in (S.RUNNING, S.STOPPING):
            return instance_walk(instance, [S.STOPPING, S.STOPPED], reason=why, actor=actor, at=at)
        return instance
    if state == CloudState.STOPPING and instance.status == S.RUNNING:
        return instance_walk(instance, [S.STOPPING], reason=why, actor=actor, at=at)
    return instance


def instance_provision(*, instance_id, provider: Provider | None = None) -> Instance:
    """Launch the host of a requested instance, or find the one a crashed worker launched.

    Safe to run any number of times: the client token and the tag make a second run find or
    return the same host, and a row that was terminated meanwhile gets its host terminated.
    """
    actor = "system:provision"
    instance = instance_load(instance_id)
    if instance.rank is not None and instance.replaces_id is None:
        # A cluster node launches with all its cluster's nodes.
        return cluster_provision(instance=instance, provider=provider or get_provider())
    if instance.is_mig_slice:
        # A slice launches nothing of its own: it is placed on a shared host.
        return mig_slice_provision(instance=instance)
    if instance.status == Instance.Status.REQUESTED:
        instance, _ = instance_transition(
            instance=instance, to=Instance.Status.PROVISIONING, reason="launching", actor=actor
        )
    if instance.status != Instance.Status.PROVISIONING:
        return instance
    provider = provider or get_provider()
    existing = provider.find_tagged(str(instance.id))
    if existing:
        host = min(existing, key=launch_order_key)
        isolation = launch_isolation(instance.project)
    else:
        agent_credential_issue(instance=instance)
        request = launch_request(instance)
        host, isolation = provider.launch(request), request.isolation
    Instance.objects.filter(pk=instance.pk).update(isolation=host_isolation(isolation, host))
    instance = instance_load(instance_id)
    if not instance.is_live or instance.status == Instance.Status.TERMINATING:
        # Terminated while the launch was in flight: the host must not outlive its row.
        instance_record_host(instance, host)
        provider.terminate(host.cloud_id)
        instance_note(
            instance=instance,
            note=f"terminated host {host.cloud_id} launched after the order was cancelled",
            actor=actor,
        )
        if instance.status == Instance.Status.TERMINATING:
            return instance_apply_cloud(
                instance=instance,
                host=provider.describe([host.cloud_id]).get(host.cloud_id),
                actor=actor,
            )
        return instance
    return instance_apply_cloud(instance=instance, host=host, actor=actor)


def instance_fail(*, instance_id, reason: str) -> Instance:
    """A launch failed for good: the host fails (a cluster's node: every node not launched)."""
    instance = instance_load(instance_id)
    if instance.rank is not None and instance.replaces_id is None:
        cluster_fail(instance=instance, reason=reason)
        return instance_load(instance_id)
    if instance.status in (Instance.Status.REQUESTED, Instance.Status.PROVISIONING):
        instance, _ = instance_transition(
            instance=instance, to=Instance.Status.FAILED, reason=reason, actor="system:provision"
        )
    return instance


def instance_sync(*, instance_id, provider: Provider | None = None) -> Instance:
    """Ask the cloud about one host and record what it says."""
    instance = instance_load(instance_id)
    if not instance.cloud_id or not instance.is_live:
        return instance
    provider = provider or get_provider()
    host = provider.describe([instance.cloud_id]).get(instance.cloud_id)
    return instance_apply_cloud(instance=instance, host=host, actor="system:sync")


def instance_action_refused(*, instance_id, action: str, error: Exception) -> Instance:
    """The cloud refused a stop or start for good: put the row back where the host is, so it
    neither shows a move that will never happen nor stops being metered."""
    instance = instance_load(instance_id)
    back = {
        "stop": (Instance.Status.STOPPING, Instance.Status.RUNNING),
        "start": (Instance.Status.STARTING, Instance.Status.STOPPED),
    }.get(action)
    if back is None or instance.status != back[0]:
        return instance_sync(instance_id=instance_id)
    instance, _ = instance_transition(
        instance=instance,
        to=back[1],
        reason=f"the cloud refused to {action} it: {error}",
        actor=f"system:{action}",
    )
    return instance


def instance_cloud_action(
    *, instance_id, action: str, provider: Provider | None = None
) -> Instance:
    """Carry out a stop, start or terminate the user asked for, once the row says so."""
    expected = {
        "stop": Instance.Status.STOPPING,
        "start": Instance.Status.STARTING,
        "terminate": Instance.Status.TERMINATING,
    }[action]
    actor = f"system:{action}"
    instance = instance_load(instance_id)
    if instance.status != expected:
        return instance
    if instance.is_mig_slice:
        # Only a terminate reaches a slice (ACTIONS): it gives its slot back.
        return mig_slice_end(instance=instance)
    provider = provider or get_provider()
    if action == "terminate":
        hosts = {h.cloud_id: h for h in provider.find_tagged(str(instance.id))}
        if instance.cloud_id:
            hosts.setdefault(instance.cloud_id, None)
        if not hosts:
            return instance_walk(
                instance,
                [Instance.Status.TERMINATED],
                reason="nothing was running in the cloud yet",
                actor=actor,
                at=timezone.now(),
            )
        results = [provider.terminate(cloud_id) for cloud_id in sorted(hosts)]
        mine = next(
            (h for h in results if h is not None and h.cloud_id == instance.cloud_id),
            next((h for h in results if h is not None), None),
        )
        return instance_apply_cloud(instance=instance, host=mine, actor=actor)
    if not instance.cloud_id:
        return instance
    host = getattr(provider, action)(instance.cloud_id)
    return instance_apply_cloud(instance=instance, host=host, actor=actor)


# --- clusters: every node in one call to the cloud, all or none ------------------------------


def cluster_launch(order: Order, nodes: list[Instance]) -> ClusterLaunch:
    """The cloud's view of the cluster's launch: every node's request, in rank order."""
    return ClusterLaunch(
        cluster_id=str(order.pk),
        # EC2 tokens are at most 64 ASCII characters; fixed by the order's id.
        client_token=f"portal-cluster-{order.pk.hex}",
        nodes=tuple(launch_request(node) for node in nodes),
        efa_interfaces=order_efa_interfaces(order),
    )


def cluster_provision(*, instance: Instance, provider: Provider) -> Instance:
    """Launch the cluster ``instance`` is a node of: every node in one call to the cloud, all
    or none, or find the hosts an earlier call launched (the cloud answers a repeat with the
    same hosts). Any node's provisioning task may run it, any number of times."""
    order = instance.order
    nodes = cluster_first_nodes(order)
    for node in nodes:
        if node.status == Instance.Status.REQUESTED:
            instance_transition(
                instance=node,
                to=Instance.Status.PROVISIONING,
                reason=f"launching with its cluster of {len(nodes)} nodes",
                actor=PROVISION_ACTOR,
            )
    nodes = cluster_first_nodes(order)
    if all(node.cloud_id for node in nodes) or not any(
        node.status == Instance.Status.PROVISIONING and not node.cloud_id for node in nodes
    ):
        return _apply_known(instance, provider)
    ended = [node for node in nodes if node.status not in LAUNCHABLE]
    if ended and not any(node.cloud_id for node in nodes):
        # A node ended (cancelled, failed) before the cluster launched: none of it launches.
        cluster_fail_unlaunched(nodes, because=ended[0])
        return instance_load(instance.pk)
    for node in nodes:
        agent_credential_issue(instance=node)
    launch = cluster_launch(order, nodes)
    hosts = provider.launch_cluster(launch)
    for node, request, host in zip(nodes, launch.nodes, hosts, strict=True):
        Instance.objects.filter(pk=node.pk).update(
            isolation=host_isolation(request.isolation, host)
        )
        instance_record_host(node, host)
    nodes = cluster_first_nodes(order)
    gone = [node for node in nodes if node.status not in LAUNCHABLE]
    for node, host in zip(nodes, hosts, strict=True):
        if gone and node.status in LAUNCHABLE:
            # Part of the cluster was ended while it launched: the rest ends with it.
            node = instance_walk(
                node,
                [Instance.Status.TERMINATING],
                reason=f"{gone[0].name} of its cluster was ended while it launched; "
                f"{WHOLE_OR_NOT_AT_ALL}",
                actor=PROVISION_ACTOR,
                at=timezone.now(),
            )
        if gone:
            provider.terminate(host.cloud_id)
            instance_note(
                instance=node,
                note=f"terminated host {host.cloud_id}: its cluster was ended while it launched",
                actor=PROVISION_ACTOR,
            )
            host = provider.describe([host.cloud_id]).get(host.cloud_id)
        instance_apply_cloud(instance=node, host=host, actor=PROVISION_ACTOR)
    return instance_load(instance.pk)


def _apply_known(instance: Instance, provider: Provider) -> Instance:
    """The cluster launched already: bring this node in step with its host."""
    instance = instance_load(instance.pk)
    if not instance.cloud_id or not instance.is_live:
        return instance
    host = provider.describe([instance.cloud_id]).get(instance.cloud_id)
    return instance_apply_cloud(instance=instance, host=host, actor=PROVISION_ACTOR)
