"""A notebook through the portal, as a researcher uses it: alice starts JupyterLab from her
host's page (a real worker starts it on the simulated host), opens it on the portal's own
domain, runs a cell; carol, in another project, gets a 404 at the same address. The portal is
served by uvicorn here (ASGI, as make run serves it), so the kernel's websocket goes through."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import expect

from instances.providers.simulated_agents import host_agents
from tests.browser.conftest import REPORT_VIOLATIONS, keep_screenshot
from tests.browser.test_accessibility_browser import WIDTHS, axe_violations
from tests.browser.test_every_page_browser import sign_in_on
from tests.browser.test_narrow_screens_browser import overflow

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def signed_in(chromium, base_url: str, username: str, browser_log):
    context = chromium.new_context(base_url=base_url, viewport={"width": 1400, "height": 900})
    context.add_init_script(REPORT_VIOLATIONS)
    context.on("page", browser_log.watch)
    page = context.new_page()
    page.set_default_timeout(30_000)
    sign_in_on(page, username)
    return context, page


NOTEBOOK = {
    "cells": [
        {
            "cell_type": "code",
            "execution_count": None,
            "metadata": {},
            "outputs": [],
            "source": "print(6 * 7)",
        }
    ],
    "metadata": {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
    },
    "nbformat": 4,
    "nbformat_minor": 5,
}


def run_the_cell(page) -> None:
    """Run the notebook's cell from its toolbar, as a user does, and see it print 42. JupyterLab
    ignores a run asked for before the notebook is its current widget (no [*], nothing sent):
    like a user, the test clicks again when nothing happened."""
    output = page.locator(".jp-OutputArea-output").first
    run = page.locator(
        ".jp-NotebookPanel-toolbar [data-command='notebook:run-cell-and-select-next']"
    )
    for _ in range(3):
        dialog = page.locator(".jp-Dialog")
        if dialog.count():
            # JupyterLab sometimes asks first (which kernel, on a slow start): a user answers
            # with its default, and so does the test; what it asked is kept for a look.
            keep_screenshot(page, "notebook/dialog")
            dialog.locator(".jp-mod-accept").first.click()
        page.locator(".jp-Notebook .jp-Cell .jp-InputPrompt").first.click()
        run.click()
        try:
            expect(output).to_have_text("42", timeout=20_000)
            return
        except AssertionError:
            continue
    page.screenshot(path="test-artifacts/notebook-lab-failed.png")
    expect(output).to_have_text("42")


def check_the_card_on_a_phone_and_a_desktop(chromium, base_url: str, host) -> None:
    """The host page with its JupyterLab card passes axe and fits, at 390 and 1440 px (what the
    every-page tests check of every page; their world offers no notebooks)."""
    context = chromium.new_context(base_url=base_url, bypass_csp=True)
    try:
        page = context.new_page()
        sign_in_on(page, "alice")
        for width, viewport in WIDTHS.items():
            page.set_viewport_size(viewport)
            page.goto(f"/hosts/{host.pk}/")
            expect(page.get_by_role("link", name="Open JupyterLab")).to_be_visible()
            assert axe_violations(page, f"/hosts/{host.pk}/") == [], width
            fits = overflow(page)
            assert fits["scroll"] <= fits["inner"], (width, fits)
            keep_screenshot(page, f"notebook/host-page-{width}")
    finally:
        context.close()


def test_alice_runs_a_cell_in_her_hosts_notebook_and_carol_is_refused(
    chromium, portal_asgi, worker_process, running_host, alice, carol, settings, browser_log
):
    settings.PORTAL_SIMULATED_AGENTS = True
    worker_process(PORTAL_SIMULATED_AGENTS="1")
    host = running_host()
    base_url = f"http://{portal_asgi}"
    context, page = signed_in(chromium, base_url, "alice", browser_log)
    try:
        page.goto(f"/hosts/{host.pk}/")
        page.get_by_role("button", name="Start JupyterLab").click()
        opened = page.get_by_role("link", name="Open JupyterLab")
        expect(opened).to_be_visible(timeout=60_000)
        keep_screenshot(page, "notebook/host-page")
        check_the_card_on_a_phone_and_a_desktop(chromium, base_url, host)
        lab = opened.get_attribute("href")
        # A notebook of one cell, saved through the portal as JupyterLab saves one (a new one
        # from the launcher may swap its first kernel for another while the cell is sent).
        saved = page.request.put(
            lab.replace("/lab", "/api/contents/check.ipynb"),
            data=json.dumps({"type": "notebook", "content": NOTEBOOK}),
            headers={"Content-Type": "application/json"},
        )
        assert saved.status == 201, saved.text()
        page.goto(f"{lab}/tree/check.ipynb")
        expect(page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")).to_be_attached(
            timeout=60_000
        )
        expect(page.locator(".jp-Notebook .jp-Cell .cm-content").first).to_have_text("print(6 * 7)")
        run_the_cell(page)
        keep_screenshot(page, "notebook/lab")
    finally:
        context.close()
        host_agents().notebook_end(host.pk)

    context, page = signed_in(chromium, base_url, "carol", browser_log)
    try:
        refused = page.goto(f"/notebook/{host.pk}/lab")
        assert refused is not None and refused.status == 404
    finally:
        context.close()
