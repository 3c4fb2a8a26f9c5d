"""Orders: estimate, validate, admit (under the project lock) and place; the hosts an admitted
order creates."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from instances.lib.sshkeys import validate_public_key
from instances.metrics import order_counted
from instances.models import (
    ApprovalPolicy,
    Image,
    Instance,
    InstanceType,
    InterruptionPolicy,
    Market,
    MigProfile,
    Order,
    OrderEvent,
    Placement,
    gpu_equivalents,
    gpus_in_words,
)
from instances.selectors.clusters import cluster_refusals, order_size_bounds
from instances.selectors.costs import Estimate, order_estimate
from instances.selectors.mig import mig_order_refusals
from instances.services.admission import order_admit
from instances.services.hosts import order_instances_create
from instances.services.transitions import actor_of, order_decide_topic
from instances.services.webhooks import order_event
from portal import permissions
from portal.lib.errors import Conflict, Forbidden
from portal.models import Project, User
from portal.services import notice_send
from portal.templatetags.portal_tags import RATE, usd

log = logging.getLogger(__name__)


# --- orders ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class OrderRequest:
    """A validated order before it is placed; admission checks receive it."""

    requester: User
    project: Project
    instance_type: InstanceType
    image: Image
    market: str
    count: int
    lease_hours: int
    ssh_public_key: str
    ssh_key_fingerprint: str
    max_spot_price: Decimal | None
    interruption_policy: str
    region: str
    estimate: Estimate
    # Separate hosts, or one cluster of ``count`` nodes (with the type's EFA interfaces when
    # ``efa``): instances/services/clusters.py launches it.
    placement: str = Placement.INDEPENDENT
    efa: bool = False
    # Slices of this profile of the type's GPUs rather than whole hosts (``count`` slices).
    mig_profile: MigProfile | None = None
    # A lease extension of this (live) host rather than new hosts: ``count`` is 1 and
    # ``lease_hours`` the extra hours, so a budget check prices exactly what is added; checks
    # that count hosts leave it out (the host already holds its place).
    extends: Instance | None = None

    def fingerprint(self) -> str:
        """Digest of what was asked for, to tell a replay from a different order."""
        canonical = json.dumps(
            {
                "project": self.project.slug,
                "instance_type": self.instance_type.name,
                "image": self.image.name,
                "market": self.market,
                "count": self.count,
                "lease_hours": self.lease_hours,
                "ssh_public_key": self.ssh_public_key,
                "max_spot_price": str(self.max_spot_price) if self.max_spot_price else None,
                "interruption_policy": self.interruption_policy,
                "placement": self.placement,
                "efa": self.efa,
                "mig_profile": self.mig_profile.name if self.mig_profile else None,
            },
            sort_keys=True,
        )
        return hashlib.sha256(canonical.encode()).hexdigest()

    @property
    def gpus(self) -> Fraction:
        """The GPUs it asks for, in GPU-equivalents (a 3g slice of seven is 3/7 GPU)."""
        return self.count * gpu_equivalents(self.instance_type, self.mig_profile)


def order_validate(
    *,
    requester: User,
    project: Project,
    instance_type: InstanceType,
    image: Image,
    market: str,
    count: int,
    ssh_public_key: str,
    lease_hours: int | None = None,
    max_spot_price: Decimal | None = None,
    interruption_policy: str = "",
    placement: str = Placement.INDEPENDENT,
    efa: bool | None = None,
    mig_profile: str = "",
    key_required: bool = True,
) -> OrderRequest:
    """Check an order field by field; every problem is reported at once, named by its field.

    ``key_required=False`` leaves the SSH key out (an order page's preview, before the key is
    typed); every other rule is the submit's own. Refusals carry ``params`` (the limit, the
    prices) so that a page can say them in its own words; the API sends the messages."""
    if not permissions.can_order(requester):
        raise Forbidden("Finance can read hosts and costs but cannot order hosts.")
    errors: dict[str, list[ValidationError]] = {}

    def refuse(field_name: str, message: str, code: str, **params) -> None:
        errors.setdefault(field_name, []).append(
            ValidationError(message, code=code, params=params or None)
        )

    region = settings.PORTAL_REGION
    lease_hours = settings.PORTAL_LEASE_DEFAULT_HOURS if lease_hours is None else lease_hours
    if not permissions.can_order_in(requester, project):
        refuse(
            "project",
            f"You are not a member of {project.slug}; pick one of your projects.",
            "not_a_member",
        )
    if not project.is_active:
        refuse("project", f"{project.slug} is closed and takes no new orders.", "inactive")
    offered = InstanceType.objects.offered().filter(pk=instance_type.pk).exists()
    if not offered:
        refuse("instance_type", f"{instance_type.name} is not in the catalog.", "not_offered")
    elif region not in instance_type.regions:
        refuse(
            "instance_type",
            f"{instance_type.name} is not offered in {region}; it runs in "
            f"{', '.join(instance_type.regions)}.",
            "not_in_region",
        )
    if not image.is_active:
        refuse("image", f"{image.name} is retired; pick a current image.", "inactive")
    elif not image.supports(instance_type):
        fits = ", ".join(i.name for i in instance_type.compatible_images()) or "none"
        refuse(
            "image",
            f"{image.name} does not support the {instance_type.gpu_model} "
            f"(compute capability {instance_type.gpu_architecture}); images that fit: {fits}.",
            "incompatible_image",
        )
    elif image.image_id_for(region) is None:
        refuse(
            "image",
            f"{image.name} has no image in {region}: pick another image, or ask an admin to set "
            f"its image id for {region}.",
            "image_not_in_region",
        )
    if market not in Market.values:
        refuse("market", "market accepts on_demand or spot.", "invalid_choice")
    elif market == Market.SPOT and not instance_type.spot_offered:
        refuse(
            "market",
            f"Spot is not offered for {instance_type.name}; order it on_demand.",
            "spot_not_offered",
        )
    elif market == Market.SPOT and project.tenancy == project.Tenancy.HOST:
        refuse(
            "market",
            f"{project.slug}'s hosts run on the dedicated host {project.host_id}, which takes "
            "no spot hosts; order on_demand.",
            "spot_not_on_dedicated_host",
        )
    least, most = order_size_bounds(placement)
    if placement not in Placement.values:
        refuse("placement", "placement accepts independent or cluster.", "invalid_choice")
    elif placement == Placement.CLUSTER:
        efa = cluster_refusals(
            project=project, instance_type=instance_type, nodes=count, efa=efa, refuse=refuse
        )
    elif not least <= count <= most:
        refuse("count", f"count must be between {least} and {most}.", "out_of_range", max=most)
    elif efa:
        refuse(
            "efa",
            "efa applies to clusters: order with placement cluster and nodes, or leave efa out.",
            "cluster_only",
        )
    sliced = None
    if mig_profile and offered:
        sliced = mig_order_refusals(
            instance_type=instance_type,
            name=mig_profile,
            placement=placement,
            market=market,
            interruption_policy=interruption_policy,
            refuse=refuse,
            max_spot_price=max_spot_price,
        )
    if not 1 <= lease_hours <= settings.PORTAL_LEASE_MAX_HOURS:
        refuse(
            "lease_hours",
            f"lease_hours must be between 1 and {settings.PORTAL_LEASE_MAX_HOURS}.",
            "out_of_range",
            max=settings.PORTAL_LEASE_MAX_HOURS,
        )
    key_line, fingerprint = "", ""
    try:
        if key_required:
            key_line, fingerprint = validate_public_key(ssh_public_key)
    except ValidationError as error:
        errors.setdefault("ssh_public_key", []).extend(error.error_list)
    if market != Market.SPOT:
        if max_spot_price is not None:
            refuse("max_spot_price", "max_spot_price applies to spot orders only.", "spot_only")
        if interruption_policy:
            refuse(
                "interruption_policy",
                "interruption_policy applies to spot orders only.",
                "spot_only",
            )
    else:
        interruption_policy = interruption_policy or InterruptionPolicy.NOTIFY
        if interruption_policy not in InterruptionPolicy.values:
            refuse(
                "interruption_policy",
                "interruption_policy accepts notify, relaunch_spot or fallback_on_demand.",
                "invalid_choice",
            )
        current = instance_type.spot_price_per_hour
        if max_spot_price is not None and not mig_profile:  # a slice's is refused above
            if max_spot_price <= 0:
                refuse("max_spot_price", "max_spot_price must be more than 0.", "min_value")
            elif current is not None and max_spot_price < current:
                refuse(
                    "max_spot_price",
                    f"max_spot_price ${max_spot_price}/h is below the current spot price "
                    f"${current}/h, so the host would not launch; raise it or leave it empty.",
                    "below_spot_price",
                    price=max_spot_price,
                    current=current,
                )
    if errors:
        raise ValidationError(errors)
    return OrderRequest(
        requester=requester,
        project=project,
        instance_type=instance_type,
        image=image,
        market=market,
        count=count,
        lease_hours=lease_hours,
        ssh_public_key=key_line,
        ssh_key_fingerprint=fingerprint,
        max_spot_price=max_spot_price,
        interruption_policy=interruption_policy if market == Market.SPOT else "",
        region=region,
        estimate=order_estimate(
            instance_type=instance_type,
            market=market,
            count=count,
            lease_hours=lease_hours,
            mig_profile=sliced.profile if sliced else None,
        ),
        placement=placement,
        efa=bool(efa) and placement == Placement.CLUSTER,
        mig_profile=sliced.profile if sliced else None,
    )


def _replay(requester: User, key: str, fingerprint: str) -> Order | None:
    order = Order.objects.filter(requester=requester, idempotency_key=key).first()
    if order is None:
        return None
    if order.request_fingerprint != fingerprint:
        raise Conflict(
            "This Idempotency-Key was already used for a different order; send a new key for a "
            "new order, or the same body to get the first order back.",
            code="idempotency_key_reused",
        )
    return order


def order_submit(*, idempotency_key: str | None = None, **fields) -> tuple[Order, bool]:
    """Validate, admit and place an order (or queue it for approval); return (order, created).

    Admission checks (audit/registry.py's order_admission_checks: quota, budget) run under a
    row lock on the project, so concurrent orders of one project are admitted one at a time.
    Provisioning is enqueued only after the transaction commits.
    """
    request = order_validate(**fields)
    fingerprint = request.fingerprint()
    if idempotency_key:
        replayed = _replay(request.requester, idempotency_key, fingerprint)
        if replayed is not None:
            return replayed, False
    try:
        with transaction.atomic():
            order_admit(request)
            order, approval = order_record(
                request, idempotency_key=idempotency_key or "", request_fingerprint=fingerprint
            )
            if not approval:
                order_instances_create(order)
            order_counted("held" if approval else "admitted")
    except IntegrityError:
        # Two requests with one Idempotency-Key raced; the other placed the order.
        replayed = (
            _replay(request.requester, idempotency_key, fingerprint) if idempotency_key else None
        )
        if replayed is None:
            raise
        return replayed, False
    return order, True


def order_record(
    request: OrderRequest,
    *,
    reason: str = "no approval needed",
    approval: str | None = None,
    **fields,
) -> tuple[Order, str | None]:
    """Write the order ``request`` describes (``fields``: its idempotency key, its pool...),
    placed or held as the project's approval policy says, with its first event; the approvers
    hear of a held one. ``approval``: why the caller already knows it needs approval (a pool's
    policy answer for every launch it may make). Returns (order, why it needs approval or
    None)."""
    approval = approval or approval_needed(request)
    order = Order.objects.create(
        requester=request.requester,
        project=request.project,
        instance_type=request.instance_type,
        image=request.image,
        market=request.market,
        count=request.count,
        lease_hours=request.lease_hours,
        region=request.region,
        ssh_public_key=request.ssh_public_key,
        ssh_key_fingerprint=request.ssh_key_fingerprint,
        max_spot_price=request.max_spot_price,
        interruption_policy=request.interruption_policy,
        placement=request.placement,
        efa=request.efa,
        mig_profile=request.mig_profile,
        mig_price_share=request.mig_profile.price_share if request.mig_profile else None,
        quoted_price_per_hour=request.estimate.price_per_host_hour,
        status=Order.Status.PENDING_APPROVAL if approval else Order.Status.PLACED,
        approval_reason=approval or "",
        **fields,
    )
    OrderEvent.objects.create(
        order=order,
        new_status=order.status,
        reason=approval or reason,
        actor=actor_of(request.requester),
    )
    if approval:
        approvers_ask(order)
    order_event(order, order.status)
    return order, approval


def approval_needed(request: OrderRequest) -> str | None:
    """Why the project's approval policy wants a human to approve this order, or None."""
    policy = ApprovalPolicy.objects.filter(project=request.project).first()
    if policy is None:
        return None
    gpus = request.gpus
    if policy.gpus_above is not None and gpus > policy.gpus_above:
        return (
            f"{gpus_in_words(gpus)} GPUs is more than the {policy.gpus_above} "
            f"{request.project.slug} allows without approval"
        )
    if request.instance_type.name in policy.instance_types:
        return f"{request.instance_type.name} needs approval in {request.project.slug}"
    per_hour = request.estimate.per_hour
    if (
        request.market == Market.ON_DEMAND
        and policy.on_demand_price_above is not None
        and per_hour > policy.on_demand_price_above
    ):
        return (
            f"{usd(per_hour, RATE)}/h on-demand is above the "
            f"{usd(policy.on_demand_price_above, RATE)}/h "
            f"{request.project.slug} allows without approval"
        )
    return None


def order_request_of(order: Order) -> OrderRequest:
    """The admission view of a placed order (approval re-runs the checks on it)."""
    return OrderRequest(
        requester=order.requester,
        project=order.project,
        instance_type=order.instance_type,
        image=order.image,
        market=order.market,
        count=order.count,
        lease_hours=order.lease_hours,
        ssh_public_key=order.ssh_public_key,
        ssh_key_fingerprint=order.ssh_key_fingerprint,
        max_spot_price=order.max_spot_price,
        interruption_policy=order.interruption_policy,
        region=order.region,
        estimate=order_estimate(
            instance_type=order.instance_type,
            market=order.market,
            count=order.count,
            lease_hours=order.lease_hours,
            mig_profile=order.mig_profile if order.is_mig_slice else None,
            share=order.mig_price_share,
        ),
        placement=order.placement,
        efa=order.efa,
        mig_profile=order.mig_profile if order.is_mig_slice else None,
    )


def approvers_ask(order: Order) -> None:
    for approver in permissions.approvers_of(order.project):
        if approver.pk != order.requester_id:
            notice_send(
                user=approver,
                subject=f"Approval needed: {order.requester.username} ordered "
                f"{order.described} for {order.project.slug}",
                body=f"{order.approval_reason}. Estimated {usd(order.price_per_hour, RATE)}/h"
                + (" at full size." if order.pool_id else "."),
                link="/approvals/",
                topic=order_decide_topic(order),
            )
