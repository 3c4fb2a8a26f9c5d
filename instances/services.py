"""Writers for the catalog, orders and hosts, and the worker side that talks to the cloud
(DESIGN rule 1: services are the only writers)."""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from functools import partial

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Prefetch, Q
from django.utils import timezone
from django.utils.module_loading import import_string

from audit.services import audit_record_system
from instances.catalog import ListPrice, gpu_reference
from instances.models import (
    Image,
    Instance,
    InstanceEvent,
    InstanceType,
    InterruptionPolicy,
    Market,
    Order,
    OrderEvent,
)
from instances.providers import get_provider
from instances.providers.base import (
    TAG_DEPLOYMENT,
    TAG_INSTANCE,
    TAG_OWNER,
    TAG_PROJECT,
    CloudHost,
    CloudState,
    InstanceTypeSpec,
    LaunchRequest,
    Provider,
    ProviderTransientError,
)
from instances.sshkeys import validate_public_key
from portal.errors import Conflict, Forbidden
from portal.models import ApprovalPolicy, Membership, Project, User
from portal.services import notice_send

log = logging.getLogger(__name__)


@dataclass
class SyncReport:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    deactivated: list[str] = field(default_factory=list)

    def summary(self) -> str:
        parts = [
            f"{len(self.created)} created",
            f"{len(self.updated)} updated",
            f"{len(self.unchanged)} unchanged",
            f"{len(self.deactivated)} deactivated",
            f"{len(self.skipped)} skipped",
        ]
        return ", ".join(parts)


@transaction.atomic
def instance_type_sync(
    *,
    provider: str,
    specs: list[InstanceTypeSpec],
    prices: dict[str, ListPrice],
    deactivate_missing: bool = True,
) -> SyncReport:
    """Create or update the catalog from what the cloud offers and what the price file says.

    A type without a list price, or with a GPU the reference does not know, is skipped with a
    reason rather than offered at a made-up price.
    """
    report = SyncReport()
    seen = set()
    for spec in specs:
        price = prices.get(spec.name)
        if price is None:
            report.skipped[spec.name] = "no list price in the price file"
            continue
        gpu = gpu_reference(spec.gpu_model, spec.gpu_memory_gib)
        if gpu is None:
            report.skipped[spec.name] = f"GPU model {spec.gpu_model} is not in gpus.json"
            continue
        seen.add(spec.name)
        values = {
            "gpu_model": gpu.model,
            "gpu_count": spec.gpu_count,
            "gpu_memory_gib": spec.gpu_memory_gib,
            "gpu_architecture": gpu.compute_capability,
            "gpu_architecture_name": gpu.architecture,
            "mig_profiles": list(gpu.mig_profiles),
            "vcpus": spec.vcpus,
            "memory_gib": spec.memory_gib,
            "local_nvme_gb": spec.local_nvme_gb,
            "network_gbps": spec.network_gbps,
            "network_burst": spec.network_burst,
            "efa": spec.efa,
            "regions": sorted(spec.regions),
            "on_demand_price_per_hour": price.on_demand,
            "price_source": price.source[:300],
            "price_as_of": price.as_of,
            "spot_offered": spec.spot,
            "is_active": True,
        }
        row = (
            InstanceType.objects.select_for_update()
            .filter(provider=provider, name=spec.name)
            .first()
        )
        if row is None:
            row = InstanceType(provider=provider, name=spec.name, **values)
            row.full_clean()
            row.save()
            report.created.append(spec.name)
            continue
        if provider == InstanceType.Provider.EC2:
            # EC2 describes one region at a time: keep the regions seen before.
            values["regions"] = sorted(set(row.regions) | set(spec.regions))
        changed = [name for name, value in values.items() if getattr(row, name) != value]
        if not changed:
            report.unchanged.append(spec.name)
            continue
        for name in changed:
            setattr(row, name, values[name])
        row.full_clean()
        row.save()
        report.updated.append(spec.name)
    if deactivate_missing:
        gone = InstanceType.objects.filter(provider=provider, is_active=True).exclude(name__in=seen)
        report.deactivated = sorted(gone.values_list("name", flat=True))
        gone.update(is_active=False)
    return report


@transaction.atomic
def image_upsert(*, row: dict) -> tuple[Image, bool]:
    """Create or update an image from a row of images.json (or the same shape)."""
    fields = {
        key: row[key]
        for key in (
            "tensorflow_version",
            "cuda_version",
            "cudnn_version",
            "nccl_version",
            "python_version",
            "min_driver_version",
            "gpu_architectures",
            "provider_image_ids",
        )
    }
    image = Image.objects.filter(name=row["name"]).first() or Image(name=row["name"])
    created = image.pk is None
    for key, value in fields.items():
        setattr(image, key, value)
    image.full_clean()
    image.save()
    return image, created


@transaction.atomic
def instance_type_save(*, instance_type: InstanceType) -> InstanceType:
    """Save a type edited in the Django admin, validating it first."""
    instance_type.full_clean()
    instance_type.save()
    return instance_type


@transaction.atomic
def image_save(*, image: Image) -> Image:
    image.full_clean()
    image.save()
    return image


@transaction.atomic
def instance_type_record_spot_price(
    *, instance_type_id: int, price_per_hour: Decimal, at: datetime
) -> bool:
    """Keep the newest spot price on the type; an older observation never replaces a newer one."""
    updated = (
        InstanceType.objects.filter(pk=instance_type_id)
        .exclude(spot_price_at__gt=at)
        .update(spot_price_per_hour=price_per_hour, spot_price_at=at)
    )
    return bool(updated)


# --- orders ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Estimate:
    """What an order will cost: per host-hour rate, and per hour, day and lease for all hosts."""

    price_per_host_hour: Decimal
    per_hour: Decimal
    per_day: Decimal
    per_lease: Decimal
    basis: str


def order_estimate(
    *, instance_type: InstanceType, market: str, count: int, lease_hours: int
) -> Estimate:
    """List price for on-demand; the current spot price for spot (list price while unknown)."""
    if market == Market.SPOT and instance_type.spot_price_per_hour is not None:
        rate = instance_type.spot_price_per_hour
        basis = f"spot price seen {instance_type.spot_price_at:%Y-%m-%d %H:%M} UTC"
    else:
        rate = instance_type.on_demand_price_per_hour
        basis = "on-demand list price"
        if market == Market.SPOT:
            basis = "on-demand list price (no spot price seen yet)"
    per_hour = rate * count
    return Estimate(
        price_per_host_hour=rate,
        per_hour=per_hour,
        per_day=per_hour * 24,
        per_lease=per_hour * lease_hours,
        basis=basis,
    )


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
            },
            sort_keys=True,
        )
        return hashlib.sha256(canonical.encode()).hexdigest()


def can_order(user: User) -> bool:
    return user.is_authenticated and not user.is_finance


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
) -> OrderRequest:
    """Check an order field by field; every problem is reported at once, named by its field."""
    if not can_order(requester):
        raise Forbidden("Finance can read hosts and costs but cannot order hosts.")
    errors: dict[str, list[ValidationError]] = {}

    def refuse(field_name: str, message: str, code: str) -> None:
        errors.setdefault(field_name, []).append(ValidationError(message, code=code))

    region = settings.PORTAL_REGION
    lease_hours = settings.PORTAL_LEASE_DEFAULT_HOURS if lease_hours is None else lease_hours
    if not requester.is_portal_admin and not project.memberships.filter(user=requester).exists():
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
        refuse("image", f"{image.name} has no image in {region}.", "image_not_in_region")
    if market not in Market.values:
        refuse("market", "market accepts on_demand or spot.", "invalid_choice")
    elif market == Market.SPOT and not instance_type.spot_offered:
        refuse(
            "market",
            f"Spot is not offered for {instance_type.name}; order it on_demand.",
            "spot_not_offered",
        )
    if not 1 <= count <= settings.PORTAL_ORDER_MAX_COUNT:
        refuse(
            "count",
            f"count must be between 1 and {settings.PORTAL_ORDER_MAX_COUNT}.",
            "out_of_range",
        )
    if not 1 <= lease_hours <= settings.PORTAL_LEASE_MAX_HOURS:
        refuse(
            "lease_hours",
            f"lease_hours must be between 1 and {settings.PORTAL_LEASE_MAX_HOURS}.",
            "out_of_range",
        )
    key_line, fingerprint = "", ""
    try:
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
        if max_spot_price is not None:
            if max_spot_price <= 0:
                refuse("max_spot_price", "max_spot_price must be more than 0.", "min_value")
            elif current is not None and max_spot_price < current:
                refuse(
                    "max_spot_price",
                    f"max_spot_price ${max_spot_price}/h is below the current spot price "
                    f"${current}/h, so the host would not launch; raise it or leave it empty.",
                    "below_spot_price",
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
            instance_type=instance_type, market=market, count=count, lease_hours=lease_hours
        ),
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

    Admission checks (ORDER_ADMISSION_CHECKS: quota, budget) run under a row lock on the project,
    so concurrent orders of one project are admitted one at a time. Provisioning is enqueued
    only after the transaction commits.
    """
    request = order_validate(**fields)
    fingerprint = request.fingerprint()
    if idempotency_key:
        replayed = _replay(request.requester, idempotency_key, fingerprint)
        if replayed is not None:
            return replayed, False
    try:
        with transaction.atomic():
            _admit(request)
            approval = approval_needed(request)
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
                quoted_price_per_hour=request.estimate.price_per_host_hour,
                status=Order.Status.PENDING_APPROVAL if approval else Order.Status.PLACED,
                approval_reason=approval or "",
                idempotency_key=idempotency_key or "",
                request_fingerprint=fingerprint,
            )
            OrderEvent.objects.create(
                order=order,
                new_status=order.status,
                reason=approval or "no approval needed",
                actor=_actor(request.requester),
            )
            if approval:
                _ask_approvers(order)
            else:
                _instances_create(order)
    except IntegrityError:
        # Two requests with one Idempotency-Key raced; the other placed the order.
        replayed = (
            _replay(request.requester, idempotency_key, fingerprint) if idempotency_key else None
        )
        if replayed is None:
            raise
        return replayed, False
    return order, True


def _admit(request: OrderRequest) -> None:
    """Run every admission check while holding the project's row lock (until commit)."""
    Project.objects.select_for_update().get(pk=request.project.pk)
    for path in settings.ORDER_ADMISSION_CHECKS:
        import_string(path)(request)


def approval_needed(request: OrderRequest) -> str | None:
    """Why the project's approval policy wants a human to approve this order, or None."""
    policy = ApprovalPolicy.objects.filter(project=request.project).first()
    if policy is None:
        return None
    gpus = request.count * request.instance_type.gpu_count
    if policy.gpus_above is not None and gpus > policy.gpus_above:
        return (
            f"{gpus} GPUs is more than the {policy.gpus_above} "
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
            f"${per_hour:.2f}/h on-demand is above the ${policy.on_demand_price_above:.2f}/h "
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
        ),
    )


def _deciders() -> Q:
    """Who may decide orders at all: active people who are not finance."""
    return Q(is_active=True) & ~Q(role=User.Role.FINANCE)


def approvers_of(project: Project):
    """Admins and the project's managers: the people asked to decide its held orders."""
    return User.objects.filter(
        _deciders(),
        Q(role=User.Role.ADMIN)
        | Q(is_superuser=True)
        | Q(memberships__project=project, memberships__role=Membership.Role.MANAGER),
    ).distinct()


def orders_to_decide(user: User):
    """Held orders this person may decide: everyone's for admins, their projects' for
    managers, never their own."""
    rows = Order.objects.filter(status=Order.Status.PENDING_APPROVAL).exclude(requester=user)
    if not user.is_authenticated or not User.objects.filter(_deciders(), pk=user.pk).exists():
        return rows.none()
    if user.is_portal_admin:
        return rows
    return rows.filter(
        project__memberships__user=user, project__memberships__role=Membership.Role.MANAGER
    ).distinct()


def can_decide(user: User, order: Order) -> bool:
    """Admins and the project's managers decide; nobody approves their own order."""
    if order.requester_id == user.pk or not user.is_authenticated or user.is_finance:
        return False
    return user.is_portal_admin or approvers_of(order.project).filter(pk=user.pk).exists()


def _ask_approvers(order: Order) -> None:
    for approver in approvers_of(order.project):
        if approver.pk != order.requester_id:
            notice_send(
                user=approver,
                subject=f"Approval needed: {order.requester.username} ordered "
                f"{order.count}× {order.instance_type.name} for {order.project.slug}",
                body=f"{order.approval_reason}. Estimated ${order.price_per_hour:.2f}/h.",
                link="/approvals/",
            )


def order_transition(*, order: Order, to: str, reason: str, actor: str) -> tuple[Order, bool]:
    """The only writer of Order.status after creation: locks, treats a repeat as a no-op,
    refuses illegal moves, records. Returns (order, changed)."""
    with transaction.atomic():
        row = Order.objects.select_for_update().get(pk=order.pk)
        if row.status == to:
            return row, False
        if to not in Order.ALLOWED[row.status]:
            raise IllegalTransition(
                f"This order is {row.get_status_display().lower()}; it cannot become "
                f"{Order.Status(to).label.lower()}."
            )
        old, row.status = row.status, to
        row.save(update_fields=["status"])
        OrderEvent.objects.create(
            order=row, old_status=old, new_status=to, reason=reason[:500], actor=actor
        )
        _audit_system(actor, action=f"{old}->{to}", object_ref=f"order:{row.pk}", reason=reason)
    return row, True


def _lock_undecided(order: Order) -> Order:
    """Lock a waiting order; a second click, or a second approver, gets a 409 (not a second set
    of hosts)."""
    row = Order.objects.select_for_update().get(pk=order.pk)
    if row.status != Order.Status.PENDING_APPROVAL:
        raise Conflict(
            f"This order was already {row.get_status_display().lower()}"
            + (f" by {row.decided_by.username}" if row.decided_by_id else "")
            + "; nothing was changed.",
            code="already_decided",
        )
    return row


def order_require_decider(*, order: Order, user: User) -> None:
    """Refuse (403) anyone who may not decide this order, before anything about the order's
    state or the decision's wording is looked at: those answers are for deciders only."""
    if not can_decide(user, order):
        raise Forbidden("Only an admin or a manager of the project (not the requester) decides.")


def order_approve(*, order: Order, user: User, reason: str = "") -> Order:
    """Approve a waiting order: the checks run again under the lock, then it provisions."""
    order_require_decider(order=order, user=user)
    with transaction.atomic():
        order = _lock_undecided(order)
        _admit(order_request_of(order))
        order, _ = order_transition(
            order=order,
            to=Order.Status.APPROVED,
            reason=reason or "approved",
            actor=_actor(user),
        )
        Order.objects.filter(pk=order.pk).update(
            decided_by=user, decided_at=timezone.now(), decision_reason=reason[:500]
        )
        _instances_create(order)
        notice_send(
            user=order.requester,
            subject=f"Approved: {order.count}× {order.instance_type.name} for {order.project.slug}",
            body=f"{user.username} approved your order; its hosts are being provisioned."
            + (f" Note: {reason}" if reason else ""),
            link="/hosts/",
        )
    order.refresh_from_db()
    return order


def order_reject(*, order: Order, user: User, reason: str) -> Order:
    order_require_decider(order=order, user=user)
    reason = (reason or "").strip()
    if not reason:
        raise ValidationError(
            {"reason": "Say why, so the researcher can order differently."}, code="required"
        )
    with transaction.atomic():
        order = _lock_undecided(order)
        order, _ = order_transition(
            order=order, to=Order.Status.REJECTED, reason=reason, actor=_actor(user)
        )
        Order.objects.filter(pk=order.pk).update(
            decided_by=user, decided_at=timezone.now(), decision_reason=reason[:500]
        )
        notice_send(
            user=order.requester,
            subject=f"Rejected: {order.count}× {order.instance_type.name} for {order.project.slug}",
            body=f"{user.username} rejected your order: {reason}",
            link="/catalog/",
        )
    order.refresh_from_db()
    return order


def orders_expire(*, now: datetime | None = None) -> list[str]:
    """Expire orders that waited longer than their project's policy allows."""
    now = now or timezone.now()
    expired = []
    waiting = Order.objects.filter(status=Order.Status.PENDING_APPROVAL).select_related(
        "project__approval_policy", "instance_type", "requester"
    )
    for order in waiting:
        policy = getattr(order.project, "approval_policy", None)
        days = policy.expire_after_days if policy else settings.PORTAL_APPROVAL_EXPIRY_DAYS
        if order.created_at > now - timedelta(days=days):
            continue
        with transaction.atomic():
            try:
                _, changed = order_transition(
                    order=order,
                    to=Order.Status.EXPIRED,
                    reason=f"nobody decided within {days} days",
                    actor="system:expire",
                )
            except IllegalTransition:
                continue  # decided meanwhile
            if not changed:
                continue  # another pass expired it first and told the requester
            notice_send(
                user=order.requester,
                subject=f"Expired: {order.count}× {order.instance_type.name} for "
                f"{order.project.slug}",
                body=f"Nobody approved your order within {days} days; order again if you "
                "still need it.",
                link="/catalog/",
            )
        expired.append(str(order.pk))
    return expired


def _instances_create(order: Order) -> list[Instance]:
    from instances import tasks

    now = timezone.now()
    actor = _actor(order.requester)
    created = []
    for _ in range(order.count):
        instance_id = uuid.uuid4()
        instance = Instance.objects.create(
            id=instance_id,
            order=order,
            project=order.project,
            owner=order.requester,
            instance_type=order.instance_type,
            image=order.image,
            market=order.market,
            region=order.region,
            # EC2 tokens are at most 64 ASCII characters; this one is fixed before any call.
            client_token=f"portal-{instance_id.hex}",
            status_changed_at=now,
        )
        InstanceEvent.objects.create(
            instance=instance,
            old_status="",
            new_status=Instance.Status.REQUESTED,
            reason=f"ordered by {order.requester.username}",
            at=now,
            actor=actor,
        )
        created.append(instance)
        enqueue(tasks.provision_instance, str(instance_id))
    return created


def enqueue(task, *args) -> None:
    """Send a task once the transaction commits. robust: a broker outage must not turn a
    committed order into an error answer (the caller would retry and order twice); the
    reconciler enqueues work that sat too long, so a lost send is repaired."""
    transaction.on_commit(partial(task.delay, *args), robust=True)


# --- the instance state machine --------------------------------------------------------------


class IllegalTransition(Conflict):
    code = "invalid_state"


def _actor(user: User | None, task: str = "") -> str:
    return f"user:{user.username}" if user is not None else f"system:{task or 'portal'}"


def instance_transition(
    *,
    instance: Instance | uuid.UUID | str,
    to: str,
    reason: str,
    actor: str,
    at: datetime | None = None,
) -> tuple[Instance, bool]:
    """The only writer of Instance.status (DESIGN rule 3). Locks the row, treats a repeat as a
    no-op, refuses illegal moves, and records the move with the cloud's time when given."""
    pk = instance.pk if isinstance(instance, Instance) else instance
    with transaction.atomic():
        row = Instance.objects.select_for_update().select_related("order").get(pk=pk)
        if row.status == to:
            return row, False
        if to not in Instance.ALLOWED[row.status]:
            raise IllegalTransition(
                f"A host that is {row.get_status_display().lower()} cannot become "
                f"{Instance.Status(to).label.lower()}.",
            )
        at = at or timezone.now()
        # Never record a move earlier than the one before it: clocks of clouds and workers differ.
        at = max(at, row.status_changed_at)
        old = row.status
        row.status = to
        row.status_reason = reason[:500]
        row.status_changed_at = at
        fields = ["status", "status_reason", "status_changed_at"]
        if to == Instance.Status.RUNNING and row.lease_expires_at is None:
            row.lease_expires_at = at + timedelta(hours=row.order.lease_hours)
            fields.append("lease_expires_at")
        row.save(update_fields=fields)
        InstanceEvent.objects.create(
            instance=row, old_status=old, new_status=to, reason=reason[:500], at=at, actor=actor
        )
        _audit_system(actor, action=f"{old}->{to}", object_ref=f"instance:{row.pk}", reason=reason)
    return row, True


def _audit_system(actor: str, *, action: str, object_ref: str, reason: str) -> None:
    """Changes made by tasks leave an audit row too (a user's are covered by their request's)."""
    if actor.startswith("system:"):
        audit_record_system(
            name=actor.removeprefix("system:"),
            action=action,
            object_ref=object_ref,
            summary={"reason": reason[:300]},
        )


def _walk(instance: Instance, path: list[str], *, reason: str, actor: str, at: datetime):
    """Apply several moves at the cloud's time (e.g. running → stopping → stopped when a host was
    stopped behind the portal's back), skipping the ones already made. If another process moved
    the row meanwhile, stop where it is: the next look at the cloud continues from there."""
    for status in path:
        if instance.status == status:
            continue
        if status not in Instance.ALLOWED[instance.status]:
            continue
        try:
            instance, _ = instance_transition(
                instance=instance, to=status, reason=reason, actor=actor, at=at
            )
        except IllegalTransition:
            return instance_load(instance.pk)
    return instance


def instance_note(*, instance: Instance, note: str, actor: str) -> None:
    """Record an action that changed no status (an adoption, a re-enqueue) on the timeline."""
    InstanceEvent.objects.create(
        instance=instance,
        old_status=instance.status,
        new_status=instance.status,
        reason=note[:500],
        at=timezone.now(),
        actor=actor,
    )
    _audit_system(actor, action="note", object_ref=f"instance:{instance.pk}", reason=note)


# --- what users may do to a host -------------------------------------------------------------


def managed_project_ids(user: User) -> set[int]:
    if not user.is_authenticated:
        return set()
    return set(
        Membership.objects.filter(user=user, role=Membership.Role.MANAGER).values_list(
            "project_id", flat=True
        )
    )


def instance_can_act(user: User, instance: Instance, managed: set[int] | None = None) -> bool:
    """Owners act on their hosts, project managers on their project's, admins on all; finance
    reads only. Pass ``managed`` (managed_project_ids) when checking many hosts."""
    if not user.is_authenticated or user.is_finance:
        return False
    if user.is_portal_admin or instance.owner_id == user.pk:
        return True
    managed = managed_project_ids(user) if managed is None else managed
    return instance.project_id in managed


def _request_action(
    *,
    instance: Instance,
    user: User,
    allowed_from: set[str],
    to: str,
    verb: str,
    done: str,
    task,
    host_allows: Callable[[Instance], None] | None = None,
) -> Instance:
    # Who may act is answered before what the host allows: someone who may not touch the host
    # hears 403, never a 409 that describes a host that is not theirs to change.
    if not instance_can_act(user, instance):
        raise Forbidden(f"You can see this host but not {verb} it; ask its owner.")
    if host_allows is not None:
        host_allows(instance)
    with transaction.atomic():
        row = Instance.objects.select_for_update().get(pk=instance.pk)
        if row.status == to:
            return row
        if row.status not in allowed_from:
            allowed = ", ".join(sorted(Instance.Status(s).label.lower() for s in allowed_from))
            raise IllegalTransition(
                f"This host is {row.get_status_display().lower()}; only {allowed} hosts can be "
                f"{done}."
            )
        row, _ = instance_transition(
            instance=row,
            to=to,
            reason=f"{verb} requested by {user.username}",
            actor=_actor(user),
        )
        enqueue(task, str(row.pk))
    return row


def _stoppable(instance: Instance) -> None:
    if instance.market == Market.SPOT:
        raise Conflict(
            "Spot hosts cannot be stopped, only terminated (the cloud would not give the "
            "capacity back).",
            code="spot_cannot_stop",
        )


def instance_request_stop(*, instance: Instance, user: User) -> Instance:
    from instances import tasks

    return _request_action(
        instance=instance,
        user=user,
        allowed_from={Instance.Status.RUNNING},
        to=Instance.Status.STOPPING,
        verb="stop",
        done="stopped",
        task=tasks.stop_instance,
        host_allows=_stoppable,
    )


def instance_request_start(*, instance: Instance, user: User) -> Instance:
    from instances import tasks

    return _request_action(
        instance=instance,
        user=user,
        allowed_from={Instance.Status.STOPPED},
        to=Instance.Status.STARTING,
        verb="start",
        done="started",
        task=tasks.start_instance,
    )


def instance_request_terminate(*, instance: Instance, user: User) -> Instance:
    from instances import tasks

    live = set(Instance.LIVE) - {Instance.Status.TERMINATING}
    return _request_action(
        instance=instance,
        user=user,
        allowed_from=live,
        to=Instance.Status.TERMINATING,
        verb="terminate",
        done="terminated",
        task=tasks.terminate_instance,
    )


# --- the worker side: talk to the cloud, then record what it said ----------------------------

# Sentences a researcher can act on, by cloud error code.
FAILURE_ADVICE = {
    "InsufficientInstanceCapacity": (
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


def launch_request(instance: Instance) -> LaunchRequest:
    order = instance.order
    return LaunchRequest(
        client_token=instance.client_token,
        instance_uuid=str(instance.id),
        instance_type=instance.instance_type.name,
        image_id=instance.image.image_id_for(instance.region) or "",
        market=instance.market,
        ssh_public_key=order.ssh_public_key,
        max_spot_price=order.max_spot_price,
        tags={
            TAG_INSTANCE: str(instance.id),
            TAG_PROJECT: instance.project.slug,
            TAG_OWNER: instance.owner.username,
        },
    )


def _record_host(instance: Instance, host: CloudHost) -> bool:
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
            return _walk(
                instance,
                [S.TERMINATED],
                reason="the cloud no longer knows this host",
                actor=actor,
                at=instance.last_seen_at or seen,
            )
        return instance
    if not _record_host(instance, host):
        return instance
    at, state = host.state_changed_at, host.state
    why = f"cloud reports {state}" + (f" ({host.state_reason})" if host.state_reason else "")
    if state == CloudState.TERMINATED:
        if instance.status == S.PROVISIONING:
            return _walk(
                instance,
                [S.FAILED],
                reason=f"the host ended before it ran: {why}",
                actor=actor,
                at=at,
            )
        if host.spot_interrupted and instance.status in (S.RUNNING, S.INTERRUPTED):
            if instance.status == S.RUNNING:
                _tell_interrupted(instance)
            return _walk(
                instance,
                [S.INTERRUPTED, S.TERMINATED],
                reason=f"spot capacity reclaimed by the cloud: {why}",
                actor=actor,
                at=at,
            )
        return _walk(instance, [S.TERMINATED], reason=why, actor=actor, at=at)
    if state == CloudState.SHUTTING_DOWN:
        return _walk(instance, [S.TERMINATING], reason=why, actor=actor, at=at)
    if state == CloudState.RUNNING:
        if instance.status == S.STOPPED:
            return _walk(instance, [S.STARTING, S.RUNNING], reason=why, actor=actor, at=at)
        if instance.status in (S.PROVISIONING, S.STARTING):
            return _walk(instance, [S.RUNNING], reason=why, actor=actor, at=at)
        return instance
    if state == CloudState.STOPPED:
        if instance.status in (S.RUNNING, S.STOPPING):
            return _walk(instance, [S.STOPPING, S.STOPPED], reason=why, actor=actor, at=at)
        return instance
    if state == CloudState.STOPPING and instance.status == S.RUNNING:
        return _walk(instance, [S.STOPPING], reason=why, actor=actor, at=at)
    return instance


def _tell_interrupted(instance: Instance) -> None:
    """The owner hears about an interruption at once (every interruption policy notifies)."""
    notice_send(
        user=instance.owner,
        subject=f"Spot host interrupted: {instance.instance_type.name} in {instance.project.slug}",
        body=f"The cloud took back spot host {instance.cloud_id}. Data on its local disks is "
        "gone; order again (on-demand cannot be interrupted).",
        link=f"/hosts/{instance.pk}/",
    )


def instance_load(instance_id) -> Instance:
    return Instance.objects.select_related(
        "order", "instance_type", "image", "project", "owner"
    ).get(pk=instance_id)


def instance_provision(*, instance_id, provider: Provider | None = None) -> Instance:
    """Launch the host of a requested instance, or find the one a crashed worker launched.

    Safe to run any number of times: the client token and the tag make a second run find or
    return the same host, and a row that was terminated meanwhile gets its host terminated.
    """
    actor = "system:provision"
    instance = instance_load(instance_id)
    if instance.status == Instance.Status.REQUESTED:
        instance, _ = instance_transition(
            instance=instance, to=Instance.Status.PROVISIONING, reason="launching", actor=actor
        )
    if instance.status != Instance.Status.PROVISIONING:
        return instance
    provider = provider or get_provider()
    existing = provider.find_tagged(str(instance.id))
    if existing:
        host = min(existing, key=_launch_order)
    else:
        host = provider.launch(launch_request(instance))
    instance = instance_load(instance_id)
    if not instance.is_live or instance.status == Instance.Status.TERMINATING:
        # Terminated while the launch was in flight: the host must not outlive its row.
        _record_host(instance, host)
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
    instance = instance_load(instance_id)
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
    provider = provider or get_provider()
    if action == "terminate":
        hosts = {h.cloud_id: h for h in provider.find_tagged(str(instance.id))}
        if instance.cloud_id:
            hosts.setdefault(instance.cloud_id, None)
        if not hosts:
            return _walk(
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


@dataclass
class ReconcileReport:
    enqueued: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    adopted: list[str] = field(default_factory=list)
    ghosts: list[str] = field(default_factory=list)
    orphans_terminated: list[str] = field(default_factory=list)
    doubles_terminated: list[str] = field(default_factory=list)
    # Hosts to end that the cloud refused for now (throttled): the next pass tries again.
    deferred: list[str] = field(default_factory=list)

    def actions(self) -> int:
        return sum(len(value) for value in vars(self).values())


REENQUEUED = "re-enqueued"
GAVE_UP = "giving up"


def _give_up(instance: Instance, *, limit: int, actor: str) -> None:
    """A stop, start or terminate nobody carried out after ``limit`` re-sends: say so once, on
    the timeline, in the log and to the portal's admins and the owner; an admin takes it on."""
    verb = {"stopping": "stop", "starting": "start", "terminating": "terminate"}[instance.status]
    instance_note(
        instance=instance,
        note=f"{REENQUEUED} {limit} times, {GAVE_UP}: no worker carried out the {verb}",
        actor=actor,
    )
    log.warning("reconcile gave up on %s of instance %s after %s tries", verb, instance.pk, limit)
    subject = f"No worker carried out the {verb} of host {str(instance.pk)[:8]}"
    body = (
        f"The {instance.instance_type.name} host of {instance.owner.username} in "
        f"{instance.project.slug} has been {instance.status} since "
        f"{instance.status_changed_at:%Y-%m-%d %H:%M} UTC; the portal sent the {verb} {limit} "
        "times and stopped trying. Check the workers, then act on the host again."
    )
    admins = User.objects.filter(role=User.Role.ADMIN, is_active=True)
    for user in {u.pk: u for u in [*admins, instance.owner]}.values():
        notice_send(user=user, subject=subject, body=body, link=f"/hosts/{instance.pk}/")


def reconcile(*, provider: Provider | None = None, now: datetime | None = None) -> ReconcileReport:
    """One pass of the loop that repairs lost and doubled work (DESIGN rule 5)."""
    from instances import tasks

    provider = provider or get_provider()
    now = now or timezone.now()
    report = ReconcileReport()
    actor = "system:reconcile"
    stuck = now - timedelta(seconds=settings.PORTAL_RECONCILE_STUCK_SECONDS)
    grace = now - timedelta(seconds=settings.PORTAL_ORPHAN_GRACE_SECONDS)
    S = Instance.Status

    # 1. Work whose task was lost: requested and never picked up, or a launch that died
    #    before the host was recorded, or a user action nobody carried out.
    lost = Instance.objects.filter(status_changed_at__lt=stuck).filter(
        Q(status__in=[S.REQUESTED, S.PROVISIONING], cloud_id__isnull=True)
        | Q(status__in=[S.STOPPING, S.STARTING, S.TERMINATING])
    )
    retry = {
        S.REQUESTED: tasks.provision_instance,
        S.PROVISIONING: tasks.provision_instance,
        S.STOPPING: tasks.stop_instance,
        S.STARTING: tasks.start_instance,
        S.TERMINATING: tasks.terminate_instance,
    }
    limit = settings.PORTAL_RECONCILE_MAX_RETRIES
    for instance in lost.prefetch_related(
        Prefetch(
            "events",
            queryset=InstanceEvent.objects.filter(reason__startswith=REENQUEUED),
            to_attr="reenqueues",
        )
    ):
        since = [e for e in instance.reenqueues if e.at >= instance.status_changed_at]
        if since and max(e.at for e in since) >= stuck:
            continue  # sent again recently: give that one time
        if len(since) >= limit:
            if instance.status in (S.REQUESTED, S.PROVISIONING):
                instance_fail(
                    instance_id=instance.pk,
                    reason=f"No worker carried out the launch after {limit} tries; order again.",
                )
            elif not any(GAVE_UP in event.reason for event in since):
                _give_up(instance, limit=limit, actor=actor)
            continue
        instance_note(
            instance=instance, note=f"{REENQUEUED}: {instance.status} for too long", actor=actor
        )
        enqueue(retry[instance.status], str(instance.pk))
        report.enqueued.append(str(instance.pk))

    # 2. Every live host the portal knows: ask the cloud, record what changed, catch ghosts.
    live = list(
        Instance.objects.filter(status__in=Instance.LIVE, cloud_id__isnull=False).select_related(
            "order", "instance_type", "image", "project", "owner"
        )
    )
    seen: dict[str, CloudHost] = {}
    # EC2 takes at most 200 values in one filter.
    for start in range(0, len(live), 200):
        seen.update(provider.describe([i.cloud_id for i in live[start : start + 200]]))
    for instance in live:
        before = instance.status
        host = seen.get(instance.cloud_id)
        instance = instance_apply_cloud(instance=instance, host=host, actor=actor)
        if host is None and instance.status != before:
            report.ghosts.append(str(instance.pk))
        elif instance.status != before:
            report.updated.append(str(instance.pk))

    # 3. Every tagged host in the cloud, by the instance it is tagged with: adopt the ones the
    #    database lost, end doubles at once and orphans after the grace.
    hosts_of: dict[str, list[CloudHost]] = {}
    for host in provider.find_tagged():
        # find_tagged filters on the deployment already; a filter the cloud ignored must still
        # not make this portal end another deployment's hosts.
        if host.tags.get(TAG_DEPLOYMENT) == settings.PORTAL_DEPLOYMENT:
            hosts_of.setdefault(host.instance_uuid, []).append(host)
    rows = Instance.objects.in_bulk([key for key in hosts_of if _is_uuid(key)], field_name="id")
    for key, hosts in hosts_of.items():
        row = rows.get(uuid.UUID(key)) if _is_uuid(key) else None
        hosts.sort(key=_launch_order)
        if row is not None and row.is_live:
            _settle_tagged(row, hosts, provider=provider, report=report, actor=actor)
            continue
        for host in hosts:
            if host.launched_at <= grace:
                _end_orphan(row, host, provider=provider, report=report, actor=actor)
    return report


def _launch_order(host: CloudHost) -> tuple:
    """Which of several hosts of one instance is kept: the earliest launched, as the
    provisioner picks it (instance_provision), so that both choose the same one."""
    return (host.launched_at, host.cloud_id)


def _settle_tagged(
    row: Instance,
    hosts: list[CloudHost],
    *,
    provider: Provider,
    report: ReconcileReport,
    actor: str,
) -> None:
    """One live row and the live hosts tagged with its id (earliest first): it keeps the host
    it records, or adopts the earliest if it records none; every other one is a duplicate and
    ends now. No grace: the row has its host, so nothing can still come to record these."""
    if row.cloud_id is None:
        row = instance_load(row.pk)  # a worker may have recorded its host since the listing
    if row.cloud_id is None:
        first = hosts[0]
        # Conditional, as a worker's record: if one records another host first, that one is kept.
        if _record_host(row, first):
            instance_note(instance=row, note=f"adopted cloud host {first.cloud_id}", actor=actor)
            instance_apply_cloud(instance=row, host=first, actor=actor)
            report.adopted.append(first.cloud_id)
        else:
            row = instance_load(row.pk)
    for host in hosts:
        if host.cloud_id == row.cloud_id:
            continue
        if not _end_host(provider, host.cloud_id):
            report.deferred.append(host.cloud_id)
            continue
        instance_note(
            instance=row,
            note=f"terminated duplicate host {host.cloud_id} (this host is {row.cloud_id})",
            actor=actor,
        )
        log.warning("reconcile: terminated duplicate host %s of %s", host.cloud_id, row.pk)
        report.doubles_terminated.append(host.cloud_id)


def _end_orphan(
    row: Instance | None,
    host: CloudHost,
    *,
    provider: Provider,
    report: ReconcileReport,
    actor: str,
) -> None:
    """A tagged host older than the grace whose row is gone or no longer live."""
    if not _end_host(provider, host.cloud_id):
        report.deferred.append(host.cloud_id)
        return
    if row is not None:
        instance_note(instance=row, note=f"terminated orphan host {host.cloud_id}", actor=actor)
    log.warning("reconcile: terminated orphan host %s (tag %s)", host.cloud_id, host.instance_uuid)
    if row is None:
        _audit_system(
            actor,
            action="terminate-orphan",
            object_ref=f"cloud:{host.cloud_id}",
            reason=f"tagged {host.instance_uuid}, which the portal does not know",
        )
    report.orphans_terminated.append(host.cloud_id)


def _end_host(provider: Provider, cloud_id: str) -> bool:
    """Terminate a host; True once the cloud has it going. A refused (throttled) call did
    nothing and is left for the next pass. A reply lost after the call was sent may hide a
    terminate that took effect, and a host shutting down is no longer listed, so a later pass
    could not tell: ask now, and count it done unless the cloud says the host still lives."""
    try:
        provider.terminate(cloud_id)
        return True
    except ProviderTransientError as error:
        log.info("reconcile: terminate of %s: %s", cloud_id, error)
        if not error.outcome_unknown:
            return False
    try:
        host = provider.describe([cloud_id]).get(cloud_id)
    except ProviderTransientError:
        # Most likely done; if not, the next pass finds it listed and ends it then.
        return True
    return host is None or host.state in CloudState.GONE


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except (ValueError, TypeError):
        return False
    return True


def leases_expire(*, now: datetime | None = None) -> list[str]:
    """Terminate hosts whose lease has ended; return their ids."""
    from instances import tasks

    now = now or timezone.now()
    ended = Instance.objects.filter(
        lease_expires_at__lte=now,
        status__in=[Instance.Status.RUNNING, Instance.Status.STOPPED, Instance.Status.STARTING],
    ).select_related("order")
    expired = []
    for instance in ended:
        try:
            row, moved = instance_transition(
                instance=instance,
                to=Instance.Status.TERMINATING,
                reason=f"the {instance.order.lease_hours} h lease ended",
                actor="system:lease",
            )
        except IllegalTransition:
            continue  # it moved on meanwhile (a user terminated it, the cloud lost it)
        if moved:
            enqueue(tasks.terminate_instance, str(row.pk))
            expired.append(str(row.pk))
    return expired


def instance_system_stop(*, instance: Instance, reason: str, actor: str) -> Instance:
    """Stop a running host on the portal's own account (a budget's stop-hosts policy).

    On-demand hosts stop (their owner may start them again); spot hosts terminate, since the
    cloud cannot stop a one-time spot host. A host that is no longer running is left alone.
    The cloud call is enqueued once the transaction commits.
    """
    from instances import tasks

    with transaction.atomic():
        row = Instance.objects.select_for_update().get(pk=instance.pk)
        if row.status != Instance.Status.RUNNING:
            return row
        if row.market == Market.SPOT:
            to, task = Instance.Status.TERMINATING, tasks.terminate_instance
        else:
            to, task = Instance.Status.STOPPING, tasks.stop_instance
        row, moved = instance_transition(instance=row, to=to, reason=reason, actor=actor)
        if moved:
            enqueue(task, str(row.pk))
    return row
