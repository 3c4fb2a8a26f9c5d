"""Template tags the base template takes from instances: the count on the Approvals link, and
GPU-equivalents in words (a slice of seven is "3/7").

The navigation is portal's (portal.context_processors), but what waits for a decision is
counted by instances, which portal may not import (docs/design.md rule 9); a tag library is
loaded by name when the template renders, so the base template asks instances directly.
"""

from __future__ import annotations

from django import template

from instances.models import gpus_in_words
from instances.selectors.orders import orders_to_decide_count

register = template.Library()


@register.simple_tag(takes_context=True)
def approvals_waiting(context) -> int:
    """Held orders the signed-in user may decide (the badge on Approvals)."""
    user = context.get("user")
    if user is None or not user.is_authenticated:
        return 0
    return orders_to_decide_count(user)


@register.filter
def gpus(value) -> str:
    """GPU-equivalents as people write them ("8", "3/7", "2 3/7"): a slice counts for its
    compute slices of seven."""
    return gpus_in_words(value)
