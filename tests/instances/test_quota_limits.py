"""Quota.limits lists a quota's counted limits once, for the order check, the bars and the API."""

from __future__ import annotations

from collections import Counter

from instances.models import Quota, QuotaChange, QuotaLimit
from instances.selectors.quotas import Usage, bars, change_in_words


def test_limits_come_in_order_gpus_hosts_then_each_model_and_only_where_set():
    quota = Quota(max_gpus=8, max_gpus_by_model={"H100": 4, "A10G": 2})
    used = Usage(gpus=9, instances=3, gpus_by_model=Counter({"H100": 4}))
    assert quota.limits(used) == [
        QuotaLimit("GPUs", 8, 9, "gpus"),
        QuotaLimit("A10G GPUs", 2, 0, "gpus", "A10G"),
        QuotaLimit("H100 GPUs", 4, 4, "gpus", "H100"),
    ]
    assert quota.is_over(used)
    assert not Quota(max_instances=3).is_over(used)


def test_a_bar_per_limit_with_its_level():
    quota = Quota(max_gpus=10, max_instances=0)
    shown = bars(quota, Usage(gpus=8, instances=1))
    assert [(b["label"], b["used"], b["limit"], b["percent"], b["level"]) for b in shown] == [
        ("GPUs", "8", 10, 80, "high"),
        ("Hosts", "1", 0, 100, "over"),
    ]
    assert bars(None, Usage()) == []


def test_a_history_line_names_what_changed_and_not_what_stayed_unset():
    created = QuotaChange(
        before={},
        after={"max_gpus": 8, "max_instances": None, "allowed_instance_types": []},
    )
    assert change_in_words(created) == "GPU limit set to 8."
    assert (
        change_in_words(QuotaChange(before={"max_gpus": 8}, after={}))
        == "Quota removed: no limits."
    )
