"""Quota limits keyed by a catalog name (GPUs per model, markets per type) as rows of selects.

Each row is a pair of inputs sent under the same two names (``<field>-key``, ``<field>-value``),
so the form works as a plain POST: the page always shows one empty row to fill, and a row whose
select is left empty is dropped. A small script (static/js/quota-rows.js) adds and removes rows
without a round trip. The names offered come from the catalog through ``PORTAL_QUOTA_CHOICES``
(portal sits below instances); what the rows add up to is then checked by the same
``quota_values_problems`` and ``quota_set`` the API uses.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django import forms
from django.conf import settings
from django.template.loader import render_to_string
from django.utils.module_loading import import_string

MARKETS = {"on_demand": "on-demand only", "spot": "spot only"}


@dataclass(frozen=True)
class QuotaChoices:
    """The names a quota's rows may use: the catalog's GPU models and instance types."""

    gpu_models: list[str]
    instance_types: list[str]


def quota_choices() -> QuotaChoices:
    return import_string(settings.PORTAL_QUOTA_CHOICES)()


class RowsWidget(forms.Widget):
    """Rows of (select, value) pairs; ``value_kind`` is ``number`` (an input) or ``markets``
    (a select of MARKETS)."""

    template_name = "portal/_quota_rows.html"

    def __init__(self, *, key_label: str, value_label: str, value_kind: str, attrs=None):
        super().__init__(attrs)
        self.key_label, self.value_label, self.value_kind = key_label, value_label, value_kind
        self.keys: list[str] = []

    def value_from_datadict(self, data, files, name) -> list[tuple[str, str]]:
        keys = data.getlist(f"{name}-key") if hasattr(data, "getlist") else []
        values = data.getlist(f"{name}-value") if hasattr(data, "getlist") else []
        values += [""] * (len(keys) - len(values))
        return [(key.strip(), value.strip()) for key, value in zip(keys, values, strict=False)]

    def value_omitted_from_data(self, data, files, name) -> bool:
        return f"{name}-key" not in data

    def id_for_label(self, id_: str) -> str:
        return f"{id_}-key-0" if id_ else ""

    @staticmethod
    def pairs(value) -> list[tuple[str, str]]:
        """Rows to show: a saved mapping, or the pairs as typed (kept after a refusal)."""
        if isinstance(value, dict):
            return [
                (key, str(item[0] if isinstance(item, list) and len(item) == 1 else item))
                for key, item in sorted(value.items())
            ]
        return [pair for pair in (value or []) if any(pair)]

    def render(self, name, value, attrs=None, renderer=None):
        rows = self.pairs(value)
        keys = list(self.keys) + sorted({key for key, _ in rows if key not in self.keys})
        base = (attrs or {}).get("id") or f"id_{name}"
        context = {
            "name": name,
            "base": base,
            "rows": [*rows, ("", "")],  # one empty row to fill without a script
            "keys": keys,
            "key_label": self.key_label,
            "value_label": self.value_label,
            "value_kind": self.value_kind,
            "markets": MARKETS,
        }
        return render_to_string(self.template_name, context)


class RowsField(forms.Field):
    """Rows in, a mapping out: ``{key: convert(key, value)}``, each row's problem in words."""

    def __init__(
        self,
        *,
        key_label: str,
        value_label: str,
        value_kind: str,
        convert: Callable[[str, str], Any],
        **kwargs,
    ):
        self.noun = key_label
        self.convert = convert
        widget = RowsWidget(key_label=key_label, value_label=value_label, value_kind=value_kind)
        super().__init__(widget=widget, required=False, **kwargs)

    def set_keys(self, keys: list[str]) -> None:
        self.widget.keys = list(keys)

    def clean(self, value) -> dict:
        found: dict = {}
        problems = []
        for key, raw in value or []:
            if not key and not raw:
                continue
            if not key:
                problems.append(f"Choose the {self.noun} for the row with {raw}.")
                continue
            if key in found:
                problems.append(f"{key} is on two rows; keep one.")
                continue
            try:
                found[key] = self.convert(key, raw)
            except forms.ValidationError as error:
                problems.extend(error.messages)
        if problems:
            raise forms.ValidationError(problems, code="invalid_row")
        return found


def _gpu_limit(key: str, value: str) -> int:
    if not value:
        raise forms.ValidationError(f"Give the number of {key} GPUs allowed.")
    if not value.isdigit():
        raise forms.ValidationError(f"The {key} limit must be a whole number, 0 or more.")
    return int(value)


def _market(key: str, value: str) -> list[str]:
    if value not in MARKETS:
        raise forms.ValidationError(f"Choose on-demand only or spot only for {key}.")
    return [value]


def gpu_limits_field(**kwargs) -> RowsField:
    """GPUs per model: ``{"H100": 16}``."""
    return RowsField(
        key_label="GPU model",
        value_label="GPUs at most",
        value_kind="number",
        convert=_gpu_limit,
        **kwargs,
    )


def markets_field(**kwargs) -> RowsField:
    """Markets per type: ``{"p5.48xlarge": ["spot"]}``; a type without a row allows both."""
    return RowsField(
        key_label="instance type",
        value_label="Market",
        value_kind="markets",
        convert=_market,
        **kwargs,
    )


class TypeChecklist(forms.CheckboxSelectMultiple):
    """Instance types as checkboxes folded in a <details>: its summary names what is ticked,
    or what ticking none means, so a card stays short and the choice needs no JavaScript."""

    template_name = "portal/_type_checklist.html"

    def __init__(self, *, none: str, attrs=None):
        super().__init__(attrs)
        self.none = none

    def get_context(self, name, value, attrs):
        context = super().get_context(name, value, attrs)
        ticked = [str(v) for v in value or [] if v]
        context["widget"]["summary"] = ", ".join(ticked) if ticked else self.none
        context["widget"]["none"] = self.none
        return context

    def render(self, name, value, attrs=None, renderer=None):
        # The project's template engine, as RowsWidget renders (the form renderer's own engine
        # sees only Django's widget templates).
        return render_to_string(self.template_name, self.get_context(name, value, attrs))


class TypesField(forms.MultipleChoiceField):
    """A list of instance type names ticked from the catalog; a name kept from before that the
    catalog no longer offers stays on the list until it is unticked."""

    def __init__(self, *, none: str, **kwargs):
        super().__init__(required=False, widget=TypeChecklist(none=none), **kwargs)

    def set_keys(self, keys: list[str], kept=()) -> None:
        names = list(dict.fromkeys([*keys, *kept]))
        self.choices = [(name, name) for name in names]
