"""instances/selectors/hosts.py: reads of hosts that several callers share: one host with what
its pages and worker read, and the hosts a bulk action names."""

from __future__ import annotations

from instances.models import Instance


def instance_load(instance_id) -> Instance:
    """One host with what its pages and its worker read (Instance.objects.with_detail())."""
    return Instance.objects.with_detail().get(pk=instance_id)


def instances_named(user, ids) -> list[Instance] | None:
    """The hosts a bulk action names, by name, if the user sees every one of them; None when
    one is not a host they see (the caller answers 404 without saying which)."""
    hosts = list(
        Instance.objects.for_user(user)
        .filter(pk__in=ids)
        .select_related("instance_type", "project")
        .distinct()
    )
    if len(hosts) < len(set(ids)):
        return None
    return sorted(hosts, key=lambda host: host.name)
