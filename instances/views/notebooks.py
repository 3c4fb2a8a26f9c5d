"""JupyterLab through the portal: the host page's Open and Stop buttons, and the proxy under
``/notebook/<host id>/`` (HTTP here, the kernels' websockets in NotebookSocket).

Not an open proxy: a request reaches only the address the portal recorded for the notebook it
started on that host, and only for someone who may act on the host (its owner, the project's
managers, admins); everyone else gets the 404 a host they cannot see gives. The browser's
cookies (the portal's session) never reach the host; the portal authenticates to JupyterLab
with the notebook's own token. A request from another site is refused by its Origin (unsafe
methods and websockets), and the session cookie is SameSite=Lax besides.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import hashlib
import re
from collections.abc import AsyncIterator

import httpx
import websockets
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from audit.lib.limits import content_length
from instances.models import Instance, Notebook
from instances.services import live_notebook, notebook_close, notebook_open
from portal import permissions
from portal.lib.pages import service_errors

# Headers that belong to one connection (RFC 9110 7.6.1), and what must not reach the host:
# the portal's own cookies and credentials, and the browser's origin (checked here instead).
DROPPED_REQUEST = frozenset(
    {
        "connection",
        "keep-alive",
        "transfer-encoding",
        "upgrade",
        "te",
        "host",
        "cookie",
        "authorization",
        "origin",
        "referer",
        "content-length",
        "x-csrftoken",
    }
)
DROPPED_RESPONSE = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "upgrade", "set-cookie", "content-length"}
)
# JupyterLab's own pages: its bundles inject styles and run from blobs; everything stays on
# the portal's origin (websockets included), and no other site may frame it. A page's own
# inline scripts (JupyterLab's loader) are allowed by their hashes, and no other.
NOTEBOOK_POLICY = (
    "default-src 'self'; script-src 'self' 'unsafe-eval'{hashes}; "
    "style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; font-src 'self' data:; "
    "connect-src 'self'; worker-src 'self' blob:; frame-src 'self' blob:; "
    "frame-ancestors 'self'; form-action 'self'; base-uri 'self'; object-src 'none'"
)
CHUNK = 64 * 1024  # what the proxy holds of a body at a time, either way
INLINE_SCRIPT = re.compile(
    rb"<script(?![^>]*\bsrc=)[^>]*>(.*?)</script>", re.DOTALL | re.IGNORECASE
)


def policy_for(content: bytes, content_type: str) -> str:
    """The notebook policy, allowing the inline scripts of this very page by their hashes."""
    hashes = ""
    if content_type.startswith("text/html"):
        digests = {
            base64.b64encode(hashlib.sha256(body).digest()).decode()
            for body in INLINE_SCRIPT.findall(content)
        }
        hashes = "".join(f" 'sha256-{digest}'" for digest in sorted(digests))
    return NOTEBOOK_POLICY.format(hashes=hashes)


def _acting_on(user, pk) -> Instance:
    """The host, when the caller may act on it; a 404 as for a host they cannot see otherwise."""
    instance = Instance.objects.for_user(user).filter(pk=pk).first()
    if instance is None or not permissions.can_act_on_host(user, instance):
        raise Http404("No such host.")
    return instance


@require_POST
@service_errors(back=lambda request, pk: f"/hosts/{pk}/")
def host_notebook_open(request: HttpRequest, pk) -> HttpResponse:
    instance = get_object_or_404(Instance.objects.for_user(request.user), pk=pk)
    notebook = notebook_open(instance=instance, actor=request.user)
    if notebook.status == Notebook.Status.STARTING:
        messages.success(request, "JupyterLab is starting on the host: it opens in a few seconds.")
    return redirect("host", pk=pk)


@require_POST
@service_errors(back=lambda request, pk: f"/hosts/{pk}/")
def host_notebook_stop(request: HttpRequest, pk) -> HttpResponse:
    instance = get_object_or_404(Instance.objects.for_user(request.user), pk=pk)
    notebook_close(instance=instance, actor=request.user)
    messages.success(request, "Stopped the host's JupyterLab and its kernels.")
    return redirect("host", pk=pk)


def _same_origin(request: HttpRequest) -> bool:
    origin = request.headers.get("Origin")
    return origin is None or origin == f"{request.scheme}://{request.get_host()}"


def _notebook_to_reach(user, pk) -> Notebook:
    """The host's notebook, in whatever state, for someone who may act on the host."""
    notebook = live_notebook(_acting_on(user, pk))
    if notebook is None:
        raise Http404("No notebook runs on this host: open one from the host's page.")
    return notebook


async def _relay(client: httpx.Client, reply: httpx.Response) -> AsyncIterator[bytes]:
    """The host's answer as it arrives (a downloaded checkpoint is gigabytes), its encoding
    untouched. Asynchronous, so that under ASGI Django sends each chunk as it comes (it reads
    a synchronous iterator to its end first); each read waits off the event loop. The
    connection closes when the browser has it all or goes away."""
    read = sync_to_async(
        functools.partial(next, reply.iter_raw(CHUNK), None), thread_sensitive=False
    )
    try:
        while (chunk := await read()) is not None:
            yield chunk
    finally:
        await sync_to_async(_close, thread_sensitive=False)(client, reply)


def _close(client: httpx.Client, reply: httpx.Response) -> None:
    reply.close()
    client.close()


@csrf_exempt  # JupyterLab sends its own XSRF header, not Django's; see the module's note
def notebook_proxy(request: HttpRequest, pk, rest: str = "") -> HttpResponse:
    notebook = _notebook_to_reach(request.user, pk)
    if notebook.status != Notebook.Status.RUNNING:
        response = HttpResponse(
            "JupyterLab is starting on the host; this page reloads itself.", status=503
        )
        response["Retry-After"] = "2"
        response["Refresh"] = "2"
        return response
    if request.method not in ("GET", "HEAD", "OPTIONS") and not _same_origin(request):
        return HttpResponse("Cross-site requests to a notebook are refused.", status=403)
    headers = {k: v for k, v in request.headers.items() if k.lower() not in DROPPED_REQUEST}
    headers["Authorization"] = f"token {notebook.token}"
    length = content_length(request) or 0
    if length:
        # Said outright, the length is sent as is: the host is not sent a chunked body.
        headers["Content-Length"] = str(length)
    client = httpx.Client(timeout=60, follow_redirects=False)
    query = request.META.get("QUERY_STRING", "")
    upstream = client.build_request(
        request.method,
        f"http://{notebook.address}{request.path}" + (f"?{query}" if query else ""),
        # In chunks, off Django's spooled file (or, under 1 MB, the audit middleware's copy):
        # a notebook saved with its plots (up to PORTAL_NOTEBOOK_MAX_BODY_BYTES,
        # audit/lib/limits.py) is never held whole.
        content=iter(functools.partial(request.read, CHUNK), b"") if length else None,
        headers=headers,
    )
    try:
        reply = client.send(upstream, stream=True)
    except httpx.HTTPError:
        client.close()
        return HttpResponse("The host's JupyterLab does not answer.", status=502)
    content_type = reply.headers.get("content-type", "")
    if content_type.startswith("text/html"):
        # A page is read whole: its policy names its inline scripts by their hashes.
        try:
            content = reply.read()
        finally:
            _close(client, reply)
        response = HttpResponse(content, status=reply.status_code)
        dropped = DROPPED_RESPONSE | {"content-encoding"}  # read() decoded it
    else:
        content = b""
        response = StreamingHttpResponse(_relay(client, reply), status=reply.status_code)
        dropped = DROPPED_RESPONSE
    for name, value in reply.headers.multi_items():
        if name.lower() not in dropped and name.lower() != "content-security-policy":
            response[name] = value
    response["Content-Security-Policy"] = policy_for(content, content_type)
    return response


@database_sync_to_async
def _notebook_for(user, pk) -> Notebook | None:
    try:
        instance = _acting_on(user, pk)
    except Http404:
        return None
    notebook = live_notebook(instance)
    return notebook if notebook and notebook.status == Notebook.Status.RUNNING else None


class NotebookSocket(AsyncWebsocketConsumer):
    """A kernel's (or any JupyterLab) websocket, relayed to the host's server frame by frame,
    for the same people and under the same rules as the HTTP proxy."""

    upstream = None
    relay: asyncio.Task | None = None

    async def connect(self) -> None:
        kwargs = self.scope["url_route"]["kwargs"]
        notebook = await _notebook_for(self.scope["user"], kwargs["pk"])
        if notebook is None:
            await self.close()
            return
        query = self.scope.get("query_string", b"").decode()
        url = f"ws://{notebook.address}{self.scope['path']}" + (f"?{query}" if query else "")
        try:
            self.upstream = await websockets.connect(
                url,
                additional_headers={"Authorization": f"token {notebook.token}"},
                subprotocols=self.scope.get("subprotocols") or None,
                max_size=None,
                open_timeout=10,
            )
        except (OSError, websockets.WebSocketException):
            await self.close()
            return
        await self.accept(subprotocol=self.upstream.subprotocol)
        self.relay = asyncio.create_task(self._from_host())

    async def _from_host(self) -> None:
        # The host closing its end (the kernel shut down, the server stopped) ends ours too.
        with contextlib.suppress(websockets.WebSocketException):
            async for message in self.upstream:
                if isinstance(message, bytes):
                    await self.send(bytes_data=message)
                else:
                    await self.send(text_data=message)
        await self.close()

    async def receive(self, text_data=None, bytes_data=None) -> None:
        if self.upstream is not None:
            with contextlib.suppress(websockets.WebSocketException):
                await self.upstream.send(text_data if text_data is not None else bytes_data)

    async def disconnect(self, code) -> None:
        if self.relay is not None:
            self.relay.cancel()
        if self.upstream is not None:
            await self.upstream.close()
