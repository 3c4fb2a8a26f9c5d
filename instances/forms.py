"""instances/forms.py: the pages' forms: the order form, a lease extension, and the pool
forms (a new pool, its sizes, its desired count, a schedule). They only parse what was typed:
the services (order_submit, instance_extend_lease, pool_create, pool_update, schedule_create,
...) validate for real and name the field at fault."""

from __future__ import annotations

import uuid

from django import forms
from django.conf import settings

from instances.models import InstanceType, InterruptionPolicy, Market
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
    # One key per rendered form: a double click or a resubmitted page places one order.
    submission = forms.UUIDField(widget=forms.HiddenInput, initial=uuid.uuid4)

    def __init__(self, *args, user, instance_type: InstanceType, **kwargs):
        super().__init__(*args, **kwargs)
        projects = permissions.orderable_projects(user)
        self.fields["project"].choices = [(p.slug, f"{p.name} ({p.slug})") for p in projects]
        self.fields["image"].choices = [
            (
                image.name,
                f"TensorFlow {image.tensorflow_version} · CUDA {image.cuda_version} · "
                f"cuDNN {image.cudnn_version} · Python {image.python_version}",
            )
            for image in instance_type.compatible_images()
        ]
        if not instance_type.spot_offered:
            self.fields["market"].choices = [(Market.ON_DEMAND, Market.ON_DEMAND.label)]


class ExtendForm(forms.Form):
    """A lease extension from a host's page: whole hours (the service checks the limits)."""

    hours = forms.IntegerField(min_value=1)
