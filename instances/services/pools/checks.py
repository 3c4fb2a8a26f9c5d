"""instances/services/pools/checks.py: a pool's checks. Sizes, mix, fallback types, and the
order of max hosts it stands for (validated as an order is, held when the project's approval
policy says so)."""

from __future__ import annotations

import dataclasses

from django.conf import settings
from django.core.exceptions import ValidationError

from instances.lib.checkpoints import checkpoint_uri_for
from instances.models import (
    Image,
    InstanceType,
    InterruptionPolicy,
    Market,
    Order,
    Pool,
)
from instances.selectors.quotas import longest_lease
from instances.services.orders import (
    OrderRequest,
    approval_needed,
    order_estimate,
    order_record,
    order_validate,
)
from portal.models import Project, User

SIZE_FIELDS = ("min_size", "desired", "max_size")
TUNING = {
    "scale_out_minutes": (1, 120),
    "scale_in_minutes": (1, 1440),
    "cooldown_minutes": (0, 1440),
    "warmup_minutes": (0, 120),
}


def pool_market(spot_percent: int, on_demand_base: int, max_size: int) -> str:
    """The market a pool's order is priced and admitted at: spot when any host may be spot."""
    return Market.SPOT if spot_percent > 0 and max_size > on_demand_base else Market.ON_DEMAND


# --- validation ------------------------------------------------------------------------------


def refuse(errors: dict, field_name: str, message: str, code: str) -> None:
    errors.setdefault(field_name, []).append(ValidationError(message, code=code))


def check_sizes(errors: dict, values: dict) -> None:
    """min <= desired <= max, max within PORTAL_POOL_MAX_SIZE, base within max; each problem
    said once, on the field to change."""
    top = settings.PORTAL_POOL_MAX_SIZE
    low, want, high = (values[name] for name in SIZE_FIELDS)
    if not 1 <= high <= top:
        refuse(errors, "max_size", f"max_size must be between 1 and {top}.", "out_of_range")
    elif low > high:
        refuse(
            errors,
            "min_size",
            f"min_size {low} is more than max_size {high}; lower it or raise max_size.",
            "min_above_max",
        )
    elif not low <= want <= high:
        refuse(
            errors,
            "desired",
            f"desired must be between min_size {low} and max_size {high}; it is {want}.",
            "desired_out_of_range",
        )
    if not 0 <= values["on_demand_base"] <= high:
        refuse(
            errors,
            "on_demand_base",
            f"on_demand_base must be between 0 and max_size {high}.",
            "out_of_range",
        )
    if not 0 <= values["spot_percent"] <= 100:
        refuse(errors, "spot_percent", "spot_percent must be between 0 and 100.", "out_of_range")
    target = values.get("target_gpu_utilization")
    if target is not None and not 1 <= target <= 100:
        refuse(
            errors,
            "target_gpu_utilization",
            "target_gpu_utilization is a percentage between 1 and 100 (or null for none).",
            "out_of_range",
        )
    for name, (least, most) in TUNING.items():
        if name in values and not least <= values[name] <= most:
            refuse(errors, name, f"{name} must be between {least} and {most}.", "out_of_range")


def check_fallbacks(errors: dict, instance_type: InstanceType, image: Image, names) -> list:
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        refuse(
            errors,
            "fallback_instance_types",
            "fallback_instance_types is a list of instance type names.",
            "invalid",
        )
        return []
    found = {t.name: t for t in InstanceType.objects.offered().filter(name__in=names)}
    for name in names:
        other = found.get(name)
        if other is None:
            problem = f"{name[:64]} is not in the catalog."
        elif name == instance_type.name or names.count(name) > 1:
            problem = f"{name} is listed twice (the primary type is tried first anyway)."
        elif (other.gpu_model, other.gpu_count) != (
            instance_type.gpu_model,
            instance_type.gpu_count,
        ):
            problem = (
                f"{name} has {other.gpu_count}× {other.gpu_model}; a fallback must have the "
                f"same GPUs as {instance_type.name} ({instance_type.gpu_count}× "
                f"{instance_type.gpu_model})."
            )
        elif not image.supports(other):
            problem = f"{image.name} does not support {name}."
        else:
            continue
        refuse(errors, "fallback_instance_types", problem, "invalid_fallback")
        return []
    return list(names)


def pool_order_request(
    *, user: User, project: Project, fields: dict, key_required: bool = True
) -> OrderRequest:
    """The order a pool of max_size hosts would be, validated as an order is (membership, type,
    image, key, spot offered, policy); errors carry the pool's field names. ``key_required=False``
    leaves the key out (the new pool page's preview, before it is pasted)."""
    market = pool_market(fields["spot_percent"], fields["on_demand_base"], fields["max_size"])
    lease_hours, _ = longest_lease(project=project, user=user)
    try:
        request = order_validate(
            requester=user,
            project=project,
            instance_type=fields["instance_type"],
            image=fields["image"],
            market=market,
            count=1,
            ssh_public_key=fields["ssh_public_key"],
            lease_hours=lease_hours,
            interruption_policy=fields["interruption_policy"] if market == Market.SPOT else "",
            key_required=key_required,
        )
    except ValidationError as error:
        # The pool has no market field: its spot share is what picks spot.
        raise ValidationError(
            {("spot_percent" if k == "market" else k): v for k, v in error.error_dict.items()}
        ) from None
    count = fields["max_size"]
    return dataclasses.replace(
        request,
        count=count,
        estimate=order_estimate(
            instance_type=request.instance_type,
            market=market,
            count=count,
            lease_hours=lease_hours,
        ),
    )


def pool_launch_markets(
    *, spot_percent: int, on_demand_base: int, max_size: int, interruption_policy: str
) -> list[str]:
    """The markets a pool's launches may use: on-demand for its base, the share spot_percent
    leaves, or as the fill when spot has no capacity; spot for its spot share."""
    markets = []
    if (
        on_demand_base > 0
        or spot_percent < 100
        or interruption_policy == InterruptionPolicy.FALLBACK_ON_DEMAND
    ):
        markets.append(Market.ON_DEMAND)
    if spot_percent > 0 and max_size > on_demand_base:
        markets.append(Market.SPOT)
    return markets


def launch_approval(
    request: OrderRequest, *, instance_type: InstanceType, market: str
) -> str | None:
    """Why the project's approval policy would hold ``request`` launched as ``instance_type``
    on ``market`` (the order's own rule, approval_needed, on the order that launch is)."""
    return approval_needed(
        dataclasses.replace(
            request,
            instance_type=instance_type,
            market=market,
            estimate=order_estimate(
                instance_type=instance_type,
                market=market,
                count=request.count,
                lease_hours=request.lease_hours,
            ),
        )
    )


def pool_approval(
    request: OrderRequest, *, fallbacks: list[InstanceType], markets: list[str]
) -> str | None:
    """Why the project's approval policy holds a pool of ``request.count`` hosts: the first
    launch it may make (its type and each fallback, on each market it may use) that an order
    of as many hosts would need approval for. None: no launch of it needs approval."""
    own = approval_needed(request)
    if own:
        return own
    primary = request.instance_type
    for kind in [primary, *fallbacks]:
        for market in markets:
            if kind == primary and market == request.market:
                continue
            why = launch_approval(request, instance_type=kind, market=market)
            if why:
                role = (
                    "its type"
                    if kind == primary
                    else f"its fallback when {primary.name} has no capacity"
                )
                launch = "an on-demand" if market == Market.ON_DEMAND else "a spot"
                return f"{why} ({launch} launch of {kind.name}, {role})"
    return None


def pool_fallback_types(names: list[str]) -> list[InstanceType]:
    """The pool's fallback types, in the order it tries them (those still offered)."""
    found = {t.name: t for t in InstanceType.objects.offered().filter(name__in=names)}
    return [found[name] for name in names if name in found]


def pool_launch_refusal(pool: Pool, request: OrderRequest) -> str | None:
    """Why the approval policy holds a launch the pool is about to make (``request``, a market
    and type): the order rule asked of an order of the pool's approved max on that market and
    type, unless an approver approved the pool's order of that many hosts (they were shown the
    pool's every launch, fallbacks included, when it was saved)."""
    request = dataclasses.replace(request, count=pool.approved_max or pool.max_size)
    why = launch_approval(request, instance_type=request.instance_type, market=request.market)
    if why is None:
        return None
    approved = Order.objects.filter(
        pool=pool, status=Order.Status.APPROVED, count__gte=request.count
    ).exists()
    return None if approved else why


def pool_order_place(
    pool: Pool,
    request: OrderRequest,
    *,
    user: User,
    spot_percent: int,
    on_demand_base: int,
    interruption_policy: str,
) -> tuple[Order, str | None]:
    """The order standing for ``request.count`` hosts of the pool (requested by ``user``):
    placed at once, or held for the approvers when the project's policy would hold any launch
    the pool may make (pool_approval: its fallbacks and both its markets included)."""
    request = dataclasses.replace(request, requester=user)
    approval = pool_approval(
        request,
        fallbacks=pool_fallback_types(pool.fallback_instance_types),
        markets=pool_launch_markets(
            spot_percent=spot_percent,
            on_demand_base=on_demand_base,
            max_size=request.count,
            interruption_policy=interruption_policy,
        ),
    )
    order, approval = order_record(
        request, reason=f"pool {pool.name}: no approval needed", approval=approval, pool=pool
    )
    Order.objects.filter(pk=order.pk).update(
        checkpoint_uri=checkpoint_uri_for(project_slug=request.project.slug, order_id=order.pk)
    )
    return order, approval


def pool_problems(*, user: User, project: Project, fields: dict) -> tuple[list[str], str | None]:
    """What creating this pool would refuse (the submit's own checks but the SSH key) and, when
    nothing, why the approval policy would hold it: the new pool page's preview."""
    errors: dict = {}
    check_sizes(errors, fields)
    fallbacks = check_fallbacks(
        errors, fields["instance_type"], fields["image"], fields["fallback_instance_types"]
    )
    request = None
    try:
        request = pool_order_request(user=user, project=project, fields=fields, key_required=False)
    except ValidationError as error:
        for name, found in error.error_dict.items():
            errors.setdefault(name, []).extend(found)
    if errors:
        return [m for found in errors.values() for e in found for m in e.messages], None
    approval = pool_approval(
        request,
        fallbacks=pool_fallback_types(fallbacks),
        markets=pool_launch_markets(
            spot_percent=fields["spot_percent"],
            on_demand_base=fields["on_demand_base"],
            max_size=fields["max_size"],
            interruption_policy=fields["interruption_policy"],
        ),
    )
    return [], approval


def refuse_unknown(changes: dict, allowed) -> None:
    unknown = sorted(set(changes) - set(allowed))
    if unknown:
        raise ValidationError(
            {n: ValidationError(f"{n} cannot be changed.", code="read_only") for n in unknown}
        )


def pools_isolation_check(project: Project, *, values: dict) -> None:
    """A project moving onto a dedicated host (which takes no spot hosts) must first bring its
    pools' spot share to 0: their spot launches would all be refused by the cloud."""
    if values.get("tenancy") != Project.Tenancy.HOST:
        return
    names = list(
        Pool.objects.filter(project=project, status__in=Pool.LIVE, spot_percent__gt=0)
        .order_by("name")
        .values_list("name", flat=True)
    )
    if names:
        raise ValidationError(
            {
                "tenancy": f"A dedicated host takes no spot hosts: first set spot_percent to 0 "
                f"on the pools {', '.join(names)}."
            },
            code="spot_pools",
        )
