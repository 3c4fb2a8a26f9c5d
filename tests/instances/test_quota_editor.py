"""The Quotas page edits GPUs per model and markets per type as rows of selects (no JSON),
checks them by the API's rules, answers at the card it saved, and writes its history in words."""

from __future__ import annotations

import re

import pytest

from instances.models import Quota, QuotaChange
from instances.selectors.quotas import change_in_words
from instances.services import quota_set

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client, ada, catalog, projects):
    client.force_login(ada)
    return client


def _card(page: str, slug: str) -> str:
    start = page.index(f'id="q-{slug}"')
    return page[start : page.index("</article>", start)]


def test_rows_round_trip_gpus_per_model_and_markets_per_type(admin_client):
    response = admin_client.post(
        "/quotas/vision-lab/",
        {
            "vision-lab-max_gpus": "32",
            "vision-lab-max_gpus_by_model-key": ["H100", "A10G", ""],
            "vision-lab-max_gpus_by_model-value": ["16", "4", ""],
            "vision-lab-allowed_markets-key": ["p5.48xlarge", ""],
            "vision-lab-allowed_markets-value": ["spot", ""],
        },
    )
    assert (response.status_code, response["Location"]) == (302, "/quotas/#q-vision-lab")
    quota = Quota.objects.get(project__slug="vision-lab", user=None)
    assert quota.max_gpus_by_model == {"H100": 16, "A10G": 4}
    assert quota.allowed_markets == {"p5.48xlarge": ["spot"]}

    page = admin_client.get("/quotas/").content.decode()
    card = _card(page, "vision-lab")
    # The saved rows come back as selected options, plus one empty row to fill.
    assert re.search(r'<option value="H100" selected>H100</option>', card)
    assert re.search(r'<option value="A10G" selected>A10G</option>', card)
    assert 'value="16"' in card and 'value="4"' in card
    assert re.search(r'<option value="p5.48xlarge" selected>', card)
    assert '<option value="spot" selected>spot only</option>' in card
    assert "{&quot;" not in card and '{"' not in card  # no JSON anywhere
    # The message sits in the card that was saved, not at the top of the page.
    assert "Saved the quota of Vision Lab." in card
    assert page.count("Saved the quota of Vision Lab.") == 1


def test_saving_again_unchanged_keeps_the_rows(admin_client, ada, projects):
    quota_set(project=projects["vision-lab"], actor=ada, max_gpus_by_model={"H100": 8})
    admin_client.post(
        "/quotas/vision-lab/",
        {
            "vision-lab-max_gpus_by_model-key": ["H100"],
            "vision-lab-max_gpus_by_model-value": ["8"],
        },
    )
    assert Quota.objects.get(project__slug="vision-lab").max_gpus_by_model == {"H100": 8}


def test_an_emptied_row_removes_its_limit(admin_client, ada, projects):
    quota_set(project=projects["vision-lab"], actor=ada, max_gpus_by_model={"H100": 8})
    admin_client.post(
        "/quotas/vision-lab/",
        {"vision-lab-max_gpus_by_model-key": [""], "vision-lab-max_gpus_by_model-value": ["8"]},
    )
    # An empty model with a number is a half-filled row: refused, nothing changed.
    assert Quota.objects.get(project__slug="vision-lab").max_gpus_by_model == {"H100": 8}
    admin_client.post(
        "/quotas/vision-lab/",
        {"vision-lab-max_gpus_by_model-key": [""], "vision-lab-max_gpus_by_model-value": [""]},
    )
    assert Quota.objects.get(project__slug="vision-lab").max_gpus_by_model == {}


@pytest.mark.parametrize(
    ("keys", "values", "problem"),
    [
        (["H100", "H100"], ["8", "4"], "H100 is on two rows; keep one."),
        (["H100"], [""], "Give the number of H100 GPUs allowed."),
        (["H100"], ["-2"], "The H100 limit must be a whole number, 0 or more."),
        ([""], ["8"], "Choose the GPU model for the row with 8."),
        (["Z9000"], ["8"], "Z9000 is not a GPU model in the catalog"),
    ],
)
def test_a_bad_row_is_refused_at_its_field_with_what_was_typed(admin_client, keys, values, problem):
    response = admin_client.post(
        "/quotas/vision-lab/",
        {"vision-lab-max_gpus_by_model-key": keys, "vision-lab-max_gpus_by_model-value": values},
    )
    assert response.status_code == 400
    card = _card(response.content.decode(), "vision-lab")
    assert problem in card
    assert "The quota of Vision Lab was not saved" in card
    assert f'value="{values[0]}"' in card  # what was typed is kept
    assert not Quota.objects.filter(project__slug="vision-lab").exists()


def test_a_market_row_needs_a_market(admin_client):
    response = admin_client.post(
        "/quotas/vision-lab/",
        {
            "vision-lab-allowed_markets-key": ["p5.48xlarge"],
            "vision-lab-allowed_markets-value": [""],
        },
    )
    assert response.status_code == 400
    assert "Choose on-demand only or spot only for p5.48xlarge." in response.content.decode()


def test_the_policy_says_always_require_approval_for(admin_client):
    page = admin_client.get("/quotas/").content.decode()
    assert "Always require approval for" in page
    assert "Always approve" not in page


def test_history_is_written_in_sentences(admin_client, ada, projects):
    project = projects["vision-lab"]
    quota_set(project=project, actor=ada, max_gpus=16, allowed_markets={})
    quota_set(
        project=project, actor=ada, max_gpus=32, allowed_markets={"p5.48xlarge": ["on_demand"]}
    )
    card = _card(admin_client.get("/quotas/").content.decode(), "vision-lab")
    assert "GPU limit raised from 16 to 32. Spot no longer allowed for p5.48xlarge." in card
    assert "GPU limit set to 16." in card
    assert "{&#x27;" not in card and "none → none" not in card


@pytest.mark.parametrize(
    ("before", "after", "words"),
    [
        ({}, {"max_gpus": 8, "max_instances": None}, "GPU limit set to 8."),
        ({"max_gpus": 8}, {"max_gpus": 4}, "GPU limit lowered from 8 to 4."),
        ({"max_gpus": 8}, {"max_gpus": None}, "GPU limit removed (was 8)."),
        (
            {"max_lease_hours": 24},
            {"max_lease_hours": 48},
            "Longest lease raised from 24 h to 48 h.",
        ),
        ({"max_gpus": 8}, {}, "Quota removed: no limits."),
        (
            {"max_gpus_by_model": {}},
            {"max_gpus_by_model": {"H100": 16}},
            "H100 GPU limit set to 16.",
        ),
        (
            {"allowed_markets": {"p5.48xlarge": ["spot"]}},
            {"allowed_markets": {}},
            "On-demand allowed again for p5.48xlarge.",
        ),
        (
            {"allowed_instance_types": []},
            {"allowed_instance_types": ["g5.xlarge", "g6.xlarge"]},
            "Only g5.xlarge and g6.xlarge allowed (was every type).",
        ),
        (
            {"allowed_instance_types": ["g5.xlarge"]},
            {"allowed_instance_types": ["g5.xlarge", "g6.xlarge"]},
            "g6.xlarge added to the allowed types.",
        ),
        ({}, {"max_gpus": None, "allowed_markets": {}}, "Quota set, with no limits."),
    ],
)
def test_a_change_in_words(before, after, words):
    assert change_in_words(QuotaChange(before=before, after=after)) == words


def test_types_are_ticked_from_the_catalog_not_typed(admin_client, ada, projects):
    page = admin_client.get("/quotas/").content.decode()
    card = _card(page, "vision-lab")
    assert 'name="vision-lab-allowed_instance_types" value="g5.xlarge"' in card
    assert 'name="policy-vision-lab-instance_types" value="p5.48xlarge"' in card
    assert "comma" not in card
    response = admin_client.post(
        "/quotas/vision-lab/",
        {"vision-lab-allowed_instance_types": ["g6.xlarge", "g5.xlarge"]},
    )
    assert response.status_code == 302
    quota = Quota.objects.get(project__slug="vision-lab", user=None)
    assert sorted(quota.allowed_instance_types) == ["g5.xlarge", "g6.xlarge"]
    card = _card(admin_client.get("/quotas/").content.decode(), "vision-lab")
    assert re.search(r'value="g5.xlarge" id="[^"]+" checked', card)
    assert not re.search(r'value="p5.48xlarge" id="[^"]+" checked', card)
    # A name the catalog does not offer is refused at its field; nothing changes.
    response = admin_client.post(
        "/quotas/vision-lab/", {"vision-lab-allowed_instance_types": ["g9.huge"]}
    )
    assert response.status_code == 400
    assert "g9.huge is not one of the available choices" in response.content.decode()
    assert sorted(Quota.objects.get(pk=quota.pk).allowed_instance_types) == [
        "g5.xlarge",
        "g6.xlarge",
    ]


def test_a_type_gone_from_the_catalog_stays_ticked_until_unticked(admin_client, ada, projects):
    from instances.models import InstanceType

    quota_set(project=projects["vision-lab"], actor=ada, allowed_instance_types=["g5.xlarge"])
    InstanceType.objects.filter(name="g5.xlarge").update(is_active=False)
    card = _card(admin_client.get("/quotas/").content.decode(), "vision-lab")
    assert re.search(r'value="g5.xlarge" id="[^"]+" checked', card)
    response = admin_client.post("/quotas/vision-lab/", {"vision-lab-max_gpus": "8"})
    assert response.status_code == 302
    assert Quota.objects.get(project__slug="vision-lab", user=None).allowed_instance_types == []


def test_the_policy_ticks_the_types_that_always_wait(admin_client, projects):
    from instances.models import ApprovalPolicy

    response = admin_client.post(
        "/quotas/vision-lab/policy/",
        {
            "policy-vision-lab-instance_types": ["p5.48xlarge"],
            "policy-vision-lab-expire_after_days": "3",
        },
    )
    assert response.status_code == 302
    assert ApprovalPolicy.objects.get(project=projects["vision-lab"]).instance_types == [
        "p5.48xlarge"
    ]
