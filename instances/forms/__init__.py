"""instances/forms: the pages' forms: the order form, a lease extension, the pool forms (a new
pool, its sizes, its desired count, a schedule), and the fields quota and policy forms are made
of; the new job's is in jobs.py. They only parse what was typed: the services (order_submit,
job_submit, instance_extend_lease, pool_create, pool_update, schedule_create, quota_set, ...)
validate for real and name the field at fault.

Quota limits keyed by a catalog name (GPUs per model, markets per type) are rows of selects.
Each row is a pair of inputs sent under the same two names (``<field>-key``, ``<field>-value``),
so the form works as a plain POST: the page always shows one empty row to fill, and a row whose
select is left empty is dropped. A small script (static/js/quota-rows.js) adds and removes rows
without a round trip. The names offered are the catalog's (instances.selectors.quotas
.quota_choices); what the rows add up to is then checked by quota_set, as for the API.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from django import forms
from django.conf import settings
from django.template.loader import render_to_string

from instances.models import InstanceType, InterruptionPolicy, Market, Placement
from instances.providers import provider_class
from instances.selectors.mig import mig_slices
from portal import permissions


def _sizes(form: forms.Form, *, required: bool = True) -> None:
    top = settings.PORTAL_POOL_MAX_SIZE
    for name in ("min_size", "desired", "max_size", "on_demand_base"):
        form.fields[name] = forms.IntegerField(min_value=0, max_value=top, required=required)


def fallback_names(text: str | None) -> list[str]:
    """The fallback types typed comma- or line-separated, in order."""
    return [part.strip() for part in (text or "").replace("\n", ",").split(",") if part.strip()]


class PoolForm(forms.Form):
    """New pool: where, what, how many, which markets."""

    project = forms.ChoiceField()
    name = forms.CharField(max_length=64)
    instance_type = forms.ChoiceField(label="Instance type")
    fallback_instance_types = forms.CharField(
        required=False,
        label="Fallback types",
        help_text="Tried in this order when the cloud has no capacity; comma-separated.",
    )
    image = forms.ChoiceField()
    ssh_public_key = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}))
    spot_percent = forms.IntegerField(min_value=0, max_value=100, initial=0)
    interruption_policy = forms.ChoiceField(
        choices=InterruptionPolicy.choices, initial=InterruptionPolicy.RELAUNCH_SPOT
    )
    target_gpu_utilization = forms.IntegerField(min_value=1, max_value=100, required=False)

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        _sizes(self)
        self.fields["project"].choices = [
            (p.slug, f"{p.name} ({p.slug})") for p in permissions.orderable_projects(user)
        ]
        self.types = list(InstanceType.objects.offered().order_by("gpu_model", "gpu_count", "name"))
        self.fields["instance_type"].choices = [
            (t.name, f"{t.name} · {t.gpu_count}× {t.gpu_model}") for t in self.types
        ]
        # The order form's rule: the images that fit the type's GPU, newest first; the first
        # is preselected (a preselected image that does not fit promised hosts it refused).
        source = self.data if self.is_bound else self.initial
        chosen = source.get("instance_type")
        kind = next((t for t in self.types if t.name == chosen), None)
        kind = kind or (self.types[0] if self.types else None)
        self.images = list(kind.compatible_images()) if kind else []
        self.fields["image"].choices = [
            (i.name, f"{i.name} · TensorFlow {i.tensorflow_version} · CUDA {i.cuda_version}")
            for i in self.images
        ]
        self.fields["image"].error_messages["invalid_choice"] = (
            f"That image does not fit {kind.name if kind else 'this type'}'s GPU; pick one of "
            "the images listed."
        )
        names = {i.name for i in self.images}
        if not self.is_bound and self.images and self.initial.get("image") not in names:
            self.initial["image"] = self.images[0].name

    def clean_fallback_instance_types(self) -> list[str]:
        return fallback_names(self.cleaned_data.get("fallback_instance_types"))

    def service_fields(self) -> dict:
        """What pool_create takes, from the cleaned data."""
        data = dict(self.cleaned_data)
        data["instance_type"] = next(t for t in self.types if t.name == data["instance_type"])
        data["image"] = next(i for i in self.images if i.name == data["image"])
        data.pop("project")
        return data


class PoolSizesForm(forms.Form):
    """Resize a pool or change its mix (pool_update)."""

    spot_percent = forms.IntegerField(min_value=0, max_value=100)
    interruption_policy = forms.ChoiceField(choices=InterruptionPolicy.choices)
    target_gpu_utilization = forms.IntegerField(min_value=1, max_value=100, required=False)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _sizes(self)


class DesiredForm(forms.Form):
    desired = forms.IntegerField(min_value=0)


class ScheduleForm(forms.Form):
    """A scheduled action: cron in a time zone, and any of min, max and desired."""

    cron = forms.CharField(max_length=100, label="Cron")
    timezone = forms.CharField(max_length=64, initial="UTC", label="Time zone")
    min_size = forms.IntegerField(min_value=0, required=False)
    max_size = forms.IntegerField(min_value=0, required=False)
    desired = forms.IntegerField(min_value=0, required=False)


class OrderForm(forms.Form):
    """The order page's form. It checks only that each value is readable; the service checks
    the rest, and ``order_words`` says its refusals beside the fields."""

    project = forms.ChoiceField(
        error_messages={
            "required": "Choose a project.",
            "invalid_choice": "Choose one of your projects.",
        }
    )
    image = forms.ChoiceField(
        error_messages={
            "required": "Choose an image.",
            "invalid_choice": "Choose one of the images listed.",
        }
    )
    market = forms.ChoiceField(
        choices=Market.choices,
        widget=forms.RadioSelect,
        error_messages={
            "required": "Choose on-demand or spot.",
            "invalid_choice": "Choose on-demand or spot.",
        },
    )
    placement = forms.ChoiceField(
        choices=Placement.choices,
        widget=forms.RadioSelect,
        required=False,
        initial=Placement.INDEPENDENT,
        error_messages={"invalid_choice": "Choose separate hosts or one cluster."},
    )
    count = forms.IntegerField(
        initial=1,
        error_messages={
            "required": "Say how many hosts, e.g. 1.",
            "invalid": "Give the number of hosts as a whole number, e.g. 2.",
        },
    )
    lease_hours = forms.IntegerField(
        error_messages={
            "required": "Say how many hours the lease lasts, e.g. 24.",
            "invalid": "Give the lease in whole hours, e.g. 24.",
        }
    )
    ssh_public_key = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        error_messages={"required": "Paste your SSH public key (the contents of the .pub file)."},
    )
    max_spot_price = forms.DecimalField(
        required=False,
        max_digits=14,
        decimal_places=6,
        error_messages={
            "invalid": "Give a price in dollars per hour, e.g. 0.50, or leave it empty.",
            "max_digits": "Give a price in dollars per hour, e.g. 0.50, or leave it empty.",
            "max_decimal_places": "Give the price with at most six decimals.",
            "max_whole_digits": "Give a price in dollars per hour, e.g. 0.50.",
        },
    )
    interruption_policy = forms.ChoiceField(
        choices=InterruptionPolicy.choices,
        required=False,
        initial=InterruptionPolicy.NOTIFY,
        error_messages={"invalid_choice": "Choose what happens if the cloud takes it back."},
    )
    mig_profile = forms.ChoiceField(
        required=False,
        error_messages={"invalid_choice": "Choose whole hosts or one of the slices listed."},
    )
    # One key per rendered form: a double click or a resubmitted page places one order.
    submission = forms.UUIDField(widget=forms.HiddenInput, initial=uuid.uuid4)

    def __init__(self, *args, user, instance_type: InstanceType, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["mig_profile"].choices = [("", "Whole hosts")] + [
            (
                s.profile.name,
                f"{s.profile.name} slices · {s.compute_share} of a GPU, {s.profile.memory_gb} GB",
            )
            for s in (
                mig_slices([instance_type]) if provider_class().offers_slice_sessions() else []
            )
        ]
        projects = permissions.orderable_projects(user)
        self.fields["project"].choices = [(p.slug, f"{p.name} ({p.slug})") for p in projects]
        self.fields["image"].choices = [
            (
                image.name,
                f"TensorFlow {image.tensorflow_version} · CUDA {image.cuda_version} · "
                f"cuDNN {image.cudnn_version} · Python {image.python_version}"
                + (f" · JupyterLab {image.jupyterlab_version}" if image.jupyterlab_version else ""),
            )
            for image in instance_type.compatible_images()
        ]
        if not instance_type.spot_offered:
            self.fields["market"].choices = [(Market.ON_DEMAND, Market.ON_DEMAND.label)]


class ExtendForm(forms.Form):
    """A lease extension from a host's page: whole hours (the service checks the limits)."""

    hours = forms.IntegerField(min_value=1)


# --- quota rows -------------------------------------------------------------------------------

MARKETS = {"on_demand": "on-demand only", "spot": "spot only"}


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
