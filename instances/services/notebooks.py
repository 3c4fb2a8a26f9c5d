"""JupyterLab on a host: opened by whoever may act on the host, started on the host by a worker
(the cloud's own notebook_start), reached through the portal's proxy (views/notebooks.py) under
``/notebook/<host id>/``, ended with the host or on request."""

from __future__ import annotations

import contextlib
import logging
import secrets
import time

import httpx
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from instances.models import Image, Instance, Notebook
from instances.providers import get_provider, provider_class
from instances.providers.base import Provider, ProviderError
from instances.services.mig import slice_sandbox
from instances.services.queue import enqueue
from portal import permissions
from portal.lib.errors import Conflict, Forbidden

log = logging.getLogger(__name__)
N = Notebook.Status


def notebook_base_url(instance: Instance) -> str:
    """Where the host's notebook is served on the portal (and, the same path, on the host)."""
    return f"/notebook/{instance.pk}/"


def live_notebook(instance: Instance) -> Notebook | None:
    """The host's notebook server, unless the host stopped (which took it down) since it was
    started: that one is ended here, lazily, and None is the answer."""
    notebook = Notebook.objects.filter(instance=instance, status__in=Notebook.LIVE).first()
    if notebook is None:
        return None
    if instance.status != Instance.Status.RUNNING or (
        instance.status_changed_at and instance.status_changed_at > notebook.created_at
    ):
        Notebook.objects.filter(pk=notebook.pk, status__in=Notebook.LIVE).update(
            status=N.ENDED, ended_at=timezone.now(), reason="the host stopped"
        )
        return None
    return notebook


def notebook_login(image: Image) -> str:
    """The login a host of this image serves its JupyterLab as, or "" when its hosts serve
    none through the portal (the cloud offers none, or the image has no JupyterLab): what a
    launch asks the cloud to install. notebook_refusal() says why to a person."""
    if provider_class().offers_notebooks() and image.jupyterlab_version:
        return image.ssh_user
    return ""


def notebook_refusal(instance: Instance) -> tuple[str, str] | None:
    """Why this host cannot open a notebook through the portal, as (code, sentence), or None
    when it can: the cloud must offer notebooks, the host's image ship JupyterLab, and the
    host run."""
    if instance.is_mig_host:
        return (
            "mig_shared_host",
            "A shared MIG host has no notebook of its own: each slice opens its own.",
        )
    if instance.is_mig_slice and not provider_class().offers_slice_sessions():
        return (
            "slice_sessions_not_offered",
            "This cloud's shared hosts do not offer slice sessions yet.",
        )
    # The ssh -L recipe the page gives a host that has an SSH login.
    recipe = "" if instance.keyless else "use the ssh -L recipe on the host's page"
    if not provider_class().offers_notebooks():
        return (
            "notebooks_not_offered",
            "This cloud's hosts do not offer notebooks through the portal yet"
            + (f": {recipe}." if recipe else "."),
        )
    if not instance.image.jupyterlab_version:
        with_one = Image.objects.filter(is_active=True).exclude(jupyterlab_version="")
        names = ", ".join(with_one.order_by("name").values_list("name", flat=True))
        return (
            "image_without_jupyterlab",
            f"{instance.name}'s image {instance.image.name} has no JupyterLab: "
            + (f"{recipe}, or order" if recipe else "order")
            + " a host of an image that has one"
            + (f" ({names})." if names else "."),
        )
    if instance.status != Instance.Status.RUNNING:
        return (
            "host_not_running",
            f"{instance.name} is {instance.get_status_display().lower()}: a notebook runs on a "
            "running host.",
        )
    return None


def notebook_open(*, instance: Instance, actor) -> Notebook:
    """The host's notebook: the one that runs, or a new one a worker starts now."""
    if not permissions.can_act_on_host(actor, instance):
        raise Forbidden(
            "Only the host's owner, the project's managers and admins open its notebook."
        )
    refused = notebook_refusal(instance)
    if refused is not None:
        raise Conflict(refused[1], code=refused[0])
    for _ in range(2):
        found = live_notebook(instance)
        if found is not None:
            return found
        try:
            with transaction.atomic():
                notebook = Notebook.objects.create(
                    instance=instance, started_by=actor, token=secrets.token_urlsafe(32)
                )
                enqueue("instances.tasks.start_notebook", str(notebook.pk))
                return notebook
        except IntegrityError:
            continue  # another request opened it at the same moment: that one is the answer
    raise Conflict("The notebook is being opened; try again.", code="notebook_busy")


def notebook_launch(*, notebook_id, provider: Provider | None = None) -> Notebook:
    """The worker's side: start the server on the host, wait until it answers, record where.
    A notebook no longer starting (ended, or started by an earlier run) is left as it is."""
    notebook = Notebook.objects.select_related("instance").get(pk=notebook_id)
    if notebook.status != N.STARTING:
        return notebook
    instance = notebook.instance
    provider = provider or get_provider()
    try:
        slot = instance.held_slot if instance.is_mig_slice else None
        if instance.is_mig_slice and slot is None:
            raise ProviderError("The slice holds no MIG slot any more.")
        # A slice's notebook runs on its shared host, in the slice's own sandbox.
        address = provider.notebook_start(
            slot.host.cloud_id if slot else instance.cloud_id,
            instance_id=str(instance.pk),
            base_url=notebook_base_url(instance),
            token=notebook.token,
            **(slice_sandbox(instance) if slot else {}),
        )
        _wait_until_it_answers(notebook, address)
    except (ProviderError, TimeoutError) as error:
        Notebook.objects.filter(pk=notebook.pk, status=N.STARTING).update(
            status=N.FAILED, ended_at=timezone.now(), reason=str(error)[:500]
        )
        return Notebook.objects.get(pk=notebook.pk)
    Notebook.objects.filter(pk=notebook.pk, status=N.STARTING).update(
        status=N.RUNNING, address=address
    )
    return Notebook.objects.get(pk=notebook.pk)


def _wait_until_it_answers(notebook: Notebook, address: str) -> None:
    url = f"http://{address}{notebook_base_url(notebook.instance)}api/status"
    deadline = time.monotonic() + settings.PORTAL_NOTEBOOK_START_SECONDS
    while time.monotonic() < deadline:
        # Not listening yet (a refused connection) is the usual first answer: ask again.
        with contextlib.suppress(httpx.HTTPError):
            reply = httpx.get(url, headers={"Authorization": f"token {notebook.token}"}, timeout=2)
            if reply.status_code == 200:
                return
        time.sleep(0.25)
    raise TimeoutError(
        f"JupyterLab did not answer within {settings.PORTAL_NOTEBOOK_START_SECONDS} s."
    )


def notebook_close(*, instance: Instance, actor, provider: Provider | None = None) -> None:
    """Stop the host's notebook server (its kernels with it); nothing running changes nothing."""
    if not permissions.can_act_on_host(actor, instance):
        raise Forbidden(
            "Only the host's owner, the project's managers and admins stop its notebook."
        )
    notebook = live_notebook(instance)
    if notebook is None:
        return
    slot = instance.held_slot if instance.is_mig_slice else None
    cloud_id = slot.host.cloud_id if slot else instance.cloud_id
    if cloud_id:
        (provider or get_provider()).notebook_end(cloud_id, instance_id=str(instance.pk))
    Notebook.objects.filter(pk=notebook.pk, status__in=Notebook.LIVE).update(
        status=N.ENDED, ended_at=timezone.now(), reason=f"stopped by {actor.username}"
    )
