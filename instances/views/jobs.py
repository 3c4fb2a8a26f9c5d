"""instances/views/jobs.py: pages of managed jobs. The jobs list, a new job, a job's page (its
state and why, its hosts and what they cost, its runs and recoveries, its TensorBoard scalars
as charts, its live log) and what
may be asked of a job there (cancel, re-run)."""

from __future__ import annotations

import io
import re
import uuid

from django.conf import settings
from django.contrib import messages
from django.core.paginator import Paginator
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    JsonResponse,
    StreamingHttpResponse,
)
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from audit.lib.querystring import query_without
from instances.forms.jobs import JobForm
from instances.lib import tensorboard
from instances.models import Image, InstanceType, Job, JobLogChunk, JobWorkdir
from instances.selectors.costs import costs_so_far
from instances.selectors.jobs import job_archive, job_log_read, job_scalar_series
from instances.services.jobs import job_cancel, job_rerun, job_submit
from portal import permissions
from portal.lib.pages import forbidden, form_errors, mark_invalid, service_errors
from portal.models import Project

# What the page shows of a log at first: its tail; the rest is a download away.
LOG_TAIL_BYTES = 64 * 1024
# Terminal escapes (colours, cursor moves) are dropped from the page, never interpreted.
ANSI = re.compile(r"\x1b(\[[0-9;?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)?|[@-Z\\-_])")
LIVE = (Job.Status.PENDING, Job.Status.STARTING, Job.Status.RUNNING, Job.Status.RECOVERING)


def shown(text: str) -> str:
    """A log's text as the page shows it: escapes dropped, other control bytes but newlines
    and tabs as U+FFFD (the template escapes the HTML)."""
    text = ANSI.sub("", text)
    return "".join(
        "\ufffd" if ord(c) < 32 and c not in "\n\t\r" else c for c in text.replace("\r\n", "\n")
    )


def _jobs(request: HttpRequest):
    return (
        Job.objects.for_user(request.user)
        .select_related("project", "owner", "order__instance_type", "host")
        .prefetch_related("order__instances__events", "order__instances__instance_type")
    )


# Jobs per page of the jobs list, newest first (as My hosts pages its hosts).
PAGE_SIZE = 200


def jobs_page(request: HttpRequest) -> HttpResponse:
    page = Paginator(_jobs(request).order_by("-created_at", "-id"), PAGE_SIZE).get_page(
        request.GET.get("page")
    )
    jobs = list(page.object_list)
    hosts = [host for job in jobs for host in job.order.instances.all()]
    costs = costs_so_far(hosts, now=timezone.now()) if hosts else {}
    rows = [
        {"job": job, "cost": sum((costs[h.pk] for h in job.order.instances.all()), start=0)}
        for job in jobs
    ]
    return render(
        request,
        "instances/jobs.html",
        {
            "rows": rows,
            "can_submit": permissions.can_order(request.user),
            "page": page,
            "query": query_without(request.GET, "page"),
        },
    )


def job_new(request: HttpRequest) -> HttpResponse:
    if not permissions.can_order(request.user):
        return forbidden(request, "Finance can read jobs and their costs but cannot run jobs.")
    initial = {}
    source = None
    if (copy := request.GET.get("from")) and (
        source := Job.objects.for_user(request.user)
        .select_related("order__instance_type", "order__image", "order__mig_profile", "project")
        .filter(pk=_uuid(copy))
        .first()
    ):
        initial = {
            "source": source.pk,
            "project": source.project.slug,
            "name": source.name,
            "instance_type": source.order.instance_type.name,
            "image": source.order.image.name,
            "market": source.market,
            "command": source.command,
            "env": "\n".join(f"{k}={v}" for k, v in source.env.items()),
            "time_limit_minutes": source.time_limit_minutes,
            "max_recoveries": source.max_recoveries,
            "max_restarts": source.max_restarts,
            "retry_exit_codes": ", ".join(str(c) for c in source.retry_exit_codes),
            "keep_host_minutes": source.keep_host_minutes,
            "nodes": source.nodes,
            "workdir_git": source.workdir_git,
            "workdir_ref": source.workdir_ref,
            "stop_signal": source.stop_signal,
            "grace_seconds": source.grace_seconds,
            "ssh_public_key": source.order.ssh_public_key,
            "mig_profile": source.order.mig_profile.name if source.order.is_mig_slice else "",
        }
    form = JobForm(request.POST or None, request.FILES or None, user=request.user, initial=initial)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        if data["source"]:
            source = Job.objects.for_user(request.user).filter(pk=data["source"]).first()
        with form_errors(form):
            job = job_submit(
                requester=request.user,
                project=Project.objects.get(slug=data["project"]),
                instance_type=InstanceType.objects.get(name=data["instance_type"]),
                image=Image.objects.get(name=data["image"]),
                market=data["market"],
                name=data["name"],
                command=data["command"],
                env=data["env"],
                time_limit_minutes=data["time_limit_minutes"],
                max_recoveries=data["max_recoveries"],
                max_restarts=data["max_restarts"],
                retry_exit_codes=data["retry_exit_codes"],
                keep_host_minutes=data["keep_host_minutes"],
                nodes=1 if data["nodes"] is None else data["nodes"],
                workdir=_workdir(data, source),
                workdir_git=data["workdir_git"].strip(),
                workdir_ref=data["workdir_ref"].strip(),
                # Left empty: the job's defaults.
                **{
                    name: data[name]
                    for name in ("stop_signal", "grace_seconds")
                    if data[name] not in (None, "")
                },
                ssh_public_key=data["ssh_public_key"].strip(),
                mig_profile=data["mig_profile"],
                idempotency_key=f"job-page-{data['submission']}",
            )
            messages.success(request, f"Job {job.name} submitted: {job.status_reason}.")
            return redirect("job", pk=job.pk)
    status = 400 if request.method == "POST" else 200
    context = {
        "form": mark_invalid(form),
        "source": source,
        "source_workdir": JobWorkdir.objects.filter(job=source).only("size").first()
        if source
        else None,
        "workdir_max": settings.PORTAL_JOB_WORKDIR_MAX_BYTES,
        "cluster_max": settings.PORTAL_CLUSTER_MAX_NODES,
    }
    return render(request, "instances/job_new.html", context, status=status)


def _workdir(data: dict, source: Job | None) -> bytes | None:
    """The working folder a job from the page gets: the archive uploaded with it, else (no git
    repository given, and "use it again" ticked) the one uploaded with the job it was copied
    from."""
    if upload := data["workdir_tarball"]:
        # Read up to one byte past the cap: the service says it is over (it never holds more
        # than that in memory).
        return upload.read(settings.PORTAL_JOB_WORKDIR_MAX_BYTES + 1)
    if not data["reuse_workdir"] or data["workdir_git"].strip():
        return None
    return job_archive(source)


def _uuid(text: str):
    try:
        return uuid.UUID(text)
    except ValueError:
        return None


def _job_context(request: HttpRequest, job: Job) -> dict:
    hosts = sorted(job.order.instances.all(), key=lambda h: (h.created_at, str(h.pk)))
    costs = costs_so_far(hosts, now=timezone.now()) if hosts else {}
    piece = job_log_read(job, offset=max(0, job.log_bytes - LOG_TAIL_BYTES), limit=LOG_TAIL_BYTES)
    runs = list(job.runs.select_related("host"))
    return {
        "job": job,
        "hosts": [{"host": host, "cost": costs[host.pk]} for host in hosts],
        "cost": sum(costs.values(), start=0),
        "runs": runs,
        "recoveries": [run for run in runs if run.outcome in ("interrupted", "lost")],
        "events": list(reversed(job.events.all())),
        "log": piece,
        "log_text": shown(piece.text),
        "can_act": permissions.can_act_on_job(request.user, job),
        "live": job.status in LIVE,
        "has_scalars": job.scalars.exists(),
        "tensorboard": _tensorboard_logdir(job),
        # The agent uploads each run's log beside the checkpoints on S3 (portal_agent.py LOGS).
        "log_uploaded_to": uri if (uri := job.order.checkpoint_uri).startswith("s3://") else "",
    }


def _visible_job(request: HttpRequest, pk) -> Job:
    return get_object_or_404(_jobs(request), pk=pk)


def job_page(request: HttpRequest, pk) -> HttpResponse:
    job = _visible_job(request, pk)
    return render(request, "instances/job.html", _job_context(request, job))


def job_panel_partial(request: HttpRequest, pk) -> HttpResponse:
    """The job's head and facts, or with ``part=history`` its runs, hosts and timeline: each
    polled while the job lives (the log between them is polled on its own)."""
    job = _visible_job(request, pk)
    part = "_job_history" if request.GET.get("part") == "history" else "_job_panel"
    return render(request, f"instances/{part}.html", _job_context(request, job))


def job_log_partial(request: HttpRequest, pk) -> HttpResponse:
    """The log from ``offset`` on, and the element that asks for what comes next."""
    job = _visible_job(request, pk)
    try:
        offset = max(0, int(request.GET.get("offset", "0")))
    except ValueError:
        offset = 0
    piece = job_log_read(job, offset=offset, limit=LOG_TAIL_BYTES)
    return render(
        request,
        "instances/_job_log_more.html",
        {"job": job, "log": piece, "log_text": shown(piece.text), "live": job.status in LIVE},
    )


def job_scalars_data(request: HttpRequest, pk) -> JsonResponse:
    """The series the page's metric charts draw (instances/static/instances/job-scalars.js)."""
    return JsonResponse(job_scalar_series(_visible_job(request, pk)))


def job_log_file(request: HttpRequest, pk) -> HttpResponse:
    """The whole log the portal holds, as it arrived (bytes, escapes and all)."""
    job = _visible_job(request, pk)
    chunks = JobLogChunk.objects.filter(job=job).order_by("start").values_list("data", flat=True)
    response = StreamingHttpResponse(
        (bytes(data) for data in chunks.iterator(chunk_size=64)),
        content_type="text/plain; charset=utf-8",
    )
    response["Content-Disposition"] = f'attachment; filename="job-{job.name}-{job.pk}.log"'
    return response


@require_POST
@service_errors(back=lambda request, pk: f"/jobs/{pk}/")
def job_cancel_page(request: HttpRequest, pk) -> HttpResponse:
    job = _visible_job(request, pk)
    job_cancel(job=job, user=request.user)
    if request.headers.get("HX-Target", "") == "job-panel":
        return job_panel_partial(request, pk)
    messages.success(request, f"Job {job.name} cancelled; its host is ending.")
    return redirect("job", pk=pk)


@require_POST
@service_errors(back=lambda request, pk: f"/jobs/{pk}/")
def job_rerun_page(request: HttpRequest, pk) -> HttpResponse:
    job = _visible_job(request, pk)
    new = job_rerun(job=job, user=request.user)
    messages.success(request, f"Job {new.name} submitted again with the same settings.")
    return redirect("job", pk=new.pk)


def _tensorboard_logdir(job: Job) -> str:
    """The folder the job's TensorBoard reads, or "" when it has none (no checkpoint location):
    then the page offers none."""
    return tensorboard.logdir_of(job.order.checkpoint_uri)


# TensorBoard's answers carry their own Content-Security-Policy (kept: the portal's own is
# added only where none is set); these are the connection's, not the answer's.
HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "upgrade"})


@csrf_exempt
def job_tensorboard(request: HttpRequest, pk, rest: str = "") -> HttpResponse:
    """The job's own TensorBoard (instances/lib/tensorboard.py), to whoever may see the job,
    every request audited (/tensorboard/ is an audited prefix). Not a proxy: the only thing it
    reaches is TensorBoard over the folder the portal names for this job. TensorBoard's few
    POSTs are reads (batched chart queries, sent without Django's CSRF token); the session
    cookie is SameSite=Lax, so another site cannot send them as the user."""
    job = _visible_job(request, pk)
    logdir = _tensorboard_logdir(job)
    if not logdir:
        raise Http404("This job has no TensorBoard.")
    if request.method not in ("GET", "HEAD", "POST"):
        return HttpResponseNotAllowed(["GET", "HEAD", "POST"])
    app = tensorboard.tensorboard_app(logdir=logdir, path_prefix=f"/tensorboard/{job.pk}")
    body = request.body
    environ = {
        **request.environ,
        "SCRIPT_NAME": "",
        "PATH_INFO": request.path_info,
        "wsgi.input": io.BytesIO(body),
        "CONTENT_LENGTH": str(len(body)),
    }
    answer: dict = {}

    def start_response(status, headers, exc_info=None):
        answer.update(status=int(status.split()[0]), headers=headers)

    chunks = app(environ, start_response)
    try:
        content = b"".join(chunks)
    finally:
        getattr(chunks, "close", lambda: None)()
    response = HttpResponse(content, status=answer["status"])
    for name, value in answer["headers"]:
        if name.lower() not in HOP_BY_HOP:
            response[name] = value
    return response


def tensorboard_font(request: HttpRequest, name: str) -> HttpResponse:
    """The fonts TensorBoard's pages load from /font-roboto/ (its own assets; a signed-in
    user's, like the boards that use them)."""
    data = tensorboard.tensorboard_font(name)
    if data is None:
        raise Http404("TensorBoard has no such font.")
    response = HttpResponse(data, content_type="font/woff2")
    response["Cache-Control"] = "private, max-age=86400"
    return response
