"""The new pool form offers the images that fit the type's GPU, newest first, the first one
chosen (the order form's rule), and its preview runs the submit's checks: it never promises
hosts the submit then refuses."""

from __future__ import annotations

import pytest
from bs4 import BeautifulSoup
from django.urls import reverse

from tests.conftest import ED25519

pytestmark = pytest.mark.django_db


def preview_query(**overrides) -> dict:
    query = {
        "project": "vision-lab",
        "instance_type": "p5.48xlarge",
        "image": "tf-2.20-cuda12.5",
        "fallback_instance_types": "",
        "min_size": "0",
        "desired": "2",
        "max_size": "4",
        "on_demand_base": "1",
        "spot_percent": "0",
        "ssh_public_key": ED25519,
    }
    query.update(overrides)
    return query


def test_a_new_pool_offers_the_images_that_fit_its_type_newest_first(client, alice, catalog):
    client.force_login(alice)
    page = client.get(reverse("pool-new"), {"type": "p5.48xlarge"})
    soup = BeautifulSoup(page.content, "html.parser")
    options = soup.select("select#id_image option")
    fits = [i.name for i in catalog["p5.48xlarge"].compatible_images()]
    assert [o["value"] for o in options] == fits
    assert "tf-2.11-cuda11.2" not in fits  # built for compute capability 8.6 at most
    assert fits[0] == "tf-2.20-cuda12.5"
    assert [o["value"] for o in options if o.has_attr("selected")] == ["tf-2.20-cuda12.5"]
    # The preview speaks of that image from the first load.
    assert "No approval needed" in page.content.decode()


def test_the_preview_says_what_the_submit_would_refuse_instead_of_promising_hosts(
    client, alice, catalog
):
    client.force_login(alice)
    preview = client.get(reverse("pool-preview"), preview_query(image="tf-2.11-cuda11.2"))
    text = preview.content.decode()
    assert "Cannot be created as it is" in text
    assert "tf-2.11-cuda11.2 does not support the H100" in text
    assert "launch" not in text.split("Cannot be created")[1].split("</div>")[0]
    answer = client.post(
        reverse("pool-new"), {**preview_query(image="tf-2.11-cuda11.2"), "name": "x"}
    )
    assert answer.status_code == 400


def test_the_preview_of_a_pool_that_fits_promises_its_hosts(client, alice, catalog):
    client.force_login(alice)
    preview = client.get(reverse("pool-preview"), preview_query())
    assert "No approval needed: 2 hosts launch" in preview.content.decode()


def test_the_target_hint_states_the_rule_the_autoscaler_follows(client, alice, catalog):
    """It said "adds a host" (the rule is proportional), "removes the idlest" (spot above the
    share goes first) and left out the cooldown."""
    client.force_login(alice)
    page = BeautifulSoup(
        client.get(reverse("pool-new"), {"type": "g5.xlarge"}).content, "html.parser"
    )
    hint = page.select_one('[data-testid="tracking-hint"]').get_text(" ", strip=True)
    assert "the last 5 averaged above it" in hint and "first 5 minutes" in hint
    assert "hosts × average ÷ target, rounded up" in hint
    assert "the last 15 was below" in hint and "spot hosts above the pool's share" in hint
    assert "within 5 minutes of the last move" in hint
    assert "Adds a host" not in hint
