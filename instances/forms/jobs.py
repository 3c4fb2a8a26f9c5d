"""The new-job page's form (instances/views/jobs.py): it parses what was typed; job_submit checks
it for real, with the API's checks, and names the field at fault."""

from __future__ import annotations

import uuid

from django import forms

from instances.models import Image, InstanceType, JobMarket
from instances.providers import provider_class
from instances.selectors.mig import mig_slices
from instances.services.jobs.submit import STOP_SIGNALS
from portal import permissions


def _slice_choices() -> list[tuple[str, str]]:
    """One choice a MIG profile the offered types split into, naming the types it fits (none
    where the cloud gives no slice sessions)."""
    if not provider_class().offers_slice_sessions():
        return []
    by_name: dict[str, list] = {}
    for piece in mig_slices(InstanceType.objects.offered().order_by("name")):
        by_name.setdefault(piece.profile.name, []).append(piece)
    return [
        (
            name,
            f"{name} · {pieces[0].compute_share} of a GPU, {pieces[0].profile.memory_gb} GB · "
            + ", ".join(piece.instance_type.name for piece in pieces),
        )
        for name, pieces in by_name.items()
    ]


def env_lines(text: str | None) -> dict[str, str] | None:
    """``KEY=value`` lines as a mapping (blank lines and ``#`` comments skipped); None when a
    line has no ``=`` (the form says which)."""
    env: dict[str, str] = {}
    for line in (text or "").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            return None
        env[key.strip()] = value
    return env


class JobForm(forms.Form):
    """The new-job page's form: it parses what was typed; job_submit checks it for real (the
    same checks as the API) and names the field at fault."""

    project = forms.ChoiceField(error_messages={"required": "Choose a project."})
    name = forms.CharField(max_length=100, error_messages={"required": "Name the job."})
    instance_type = forms.ChoiceField(error_messages={"required": "Choose an instance type."})
    image = forms.ChoiceField(error_messages={"required": "Choose an image."})
    market = forms.ChoiceField(
        choices=JobMarket.choices,
        widget=forms.RadioSelect,
        initial=JobMarket.SPOT_THEN_ON_DEMAND,
        error_messages={"required": "Choose where its hosts come from."},
    )
    command = forms.CharField(
        strip=False,
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false", "class": "mono"}),
        error_messages={"required": "Give the command the job runs."},
    )
    env = forms.CharField(
        required=False,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false", "class": "mono"}),
    )
    time_limit_minutes = forms.IntegerField(
        initial=24 * 60, error_messages={"invalid": "Give the time limit in whole minutes."}
    )
    max_recoveries = forms.IntegerField(
        required=False, error_messages={"invalid": "A whole number, or empty for no limit."}
    )
    max_restarts = forms.IntegerField(
        initial=0, error_messages={"invalid": "A whole number of restarts, e.g. 1."}
    )
    retry_exit_codes = forms.CharField(required=False)
    keep_host_minutes = forms.IntegerField(
        initial=0, error_messages={"invalid": "Minutes as a whole number, 0 for none."}
    )
    nodes = forms.IntegerField(
        required=False,
        initial=1,
        error_messages={"invalid": "Give the number of nodes as a whole number."},
    )
    workdir_tarball = forms.FileField(
        required=False, widget=forms.ClearableFileInput(attrs={"accept": ".tar,.tar.gz,.tgz"})
    )
    workdir_git = forms.CharField(required=False, max_length=2000)
    workdir_ref = forms.CharField(required=False, max_length=200)
    stop_signal = forms.ChoiceField(
        required=False,
        choices=[(name, name) for name in STOP_SIGNALS],
        initial="SIGTERM",
        error_messages={"invalid_choice": "Choose one of the signals listed."},
    )
    grace_seconds = forms.IntegerField(
        required=False,
        initial=30,
        error_messages={"invalid": "Give the grace in whole seconds, e.g. 30."},
    )
    ssh_public_key = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 2, "spellcheck": "false"})
    )
    mig_profile = forms.ChoiceField(
        required=False,
        error_messages={"invalid_choice": "Choose whole GPUs or one of the slices listed."},
    )
    # The job this form was copied from ("Edit and run"): its uploaded working folder is used
    # again while ``reuse_workdir`` is ticked and no other folder is given.
    source = forms.UUIDField(required=False, widget=forms.HiddenInput)
    reuse_workdir = forms.BooleanField(required=False, initial=True)
    submission = forms.UUIDField(widget=forms.HiddenInput, initial=uuid.uuid4)

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["mig_profile"].choices = [("", "Whole GPUs"), *_slice_choices()]
        projects = permissions.orderable_projects(user)
        self.fields["project"].choices = [(p.slug, f"{p.name} ({p.slug})") for p in projects]
        self.fields["instance_type"].choices = [
            (t.name, f"{t.name} · {t.gpu_count}× {t.gpu_model}")
            for t in InstanceType.objects.offered().order_by("name")
        ]
        self.fields["image"].choices = [
            (image.name, f"{image.name} · TensorFlow {image.tensorflow_version}")
            for image in Image.objects.filter(is_active=True).order_by("-tensorflow_version")
        ]

    def clean_env(self) -> dict[str, str]:
        env = env_lines(self.cleaned_data.get("env"))
        if env is None:
            raise forms.ValidationError("Write one variable a line, as NAME=value.")
        return env

    def clean_retry_exit_codes(self) -> list[int]:
        parts = [p.strip() for p in (self.cleaned_data.get("retry_exit_codes") or "").split(",")]
        try:
            return [int(part) for part in parts if part]
        except ValueError:
            raise forms.ValidationError("List exit codes as numbers, e.g. 75, 143.") from None
