"""Alice edits and runs again a job she ran on a MIG slice: the form opens with everything the
job had (the slice, her SSH key, its stop signal and grace, the archive she uploaded), she
changes the command, and the new job runs as the old one did but for that."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from instances.models import Job
from tests.browser.conftest import keep_screenshot
from tests.conftest import ED25519
from tests.instances.test_job_pages import ended_slice_job

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_alice_edits_and_runs_a_slice_job_again(page, sign_in, alice, catalog, projects, settings):
    settings.PORTAL_SIMULATED_AGENTS = True  # slice sessions: the simulated agents run them
    source, archive = ended_slice_job(alice, catalog, projects, name="slice-sweep")
    sign_in("alice")
    page.goto(f"/jobs/{source.pk}/")
    page.get_by_role("link", name="Edit and run").click()
    expect(page.locator("#id_mig_profile")).to_have_value("1g.5gb")
    expect(page.locator("#id_stop_signal")).to_have_value("SIGINT")
    expect(page.locator("#id_grace_seconds")).to_have_value("90")
    expect(page.locator("#id_ssh_public_key")).to_have_value(ED25519)
    reuse = page.get_by_label("Use the archive uploaded with slice-sweep again")
    expect(reuse).to_be_checked()
    page.fill("#id_command", "python train.py --lr 0.01")
    keep_screenshot(page, "job-edit-and-run")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator(".flash")).to_contain_text("Job slice-sweep submitted")
    copy = Job.objects.exclude(pk=source.pk).get()
    assert copy.command == "python train.py --lr 0.01"
    assert copy.order.mig_profile.name == "1g.5gb" and copy.order.ssh_public_key == ED25519
    assert (copy.stop_signal, copy.grace_seconds) == ("SIGINT", 90)
    assert bytes(copy.workdir.data) == archive
    keep_screenshot(page, "job-edited-page")
