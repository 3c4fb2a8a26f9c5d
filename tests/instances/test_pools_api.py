"""The pools API: create, read with events, PATCH, DELETE, schedules and events; bad input
answers 400 with a code and a sentence; who may change a pool."""

from __future__ import annotations

from instances import services
from instances.models import Pool
from instances.services import quota_set
from tests.conftest import ED25519


def pool_body(**overrides) -> dict:
    body = {
        "project": "vision-lab",
        "name": "notebooks",
        "instance_type": "g5.xlarge",
        "image": "tf-2.17-cuda12.3",
        "ssh_public_key": ED25519,
        "min_size": 1,
        "desired": 2,
        "max_size": 6,
        "on_demand_base": 1,
        "spot_percent": 50,
        "interruption_policy": "fallback_on_demand",
        "target_gpu_utilization": 70,
    }
    body.update(overrides)
    return body


def test_alice_creates_a_pool_and_reads_it_with_its_events(api_as, alice, catalog, clock):
    api = api_as(alice)
    created = api.post("/api/v1/pools/", pool_body(), format="json")
    assert created.status_code == 201, created.json()
    body = created.json()
    assert created["Location"] == f"/api/v1/pools/{body['id']}/"
    assert body["status"] == "active"
    assert (body["min_size"], body["desired"], body["max_size"]) == (1, 2, 6)
    assert body["events"][0]["kind"] == "created"
    services.autoscale()
    read = api.get(f"/api/v1/pools/{body['id']}/").json()
    assert read["pending"] == 2
    assert read["events"][0]["kind"] == "launched"
    listed = api.get("/api/v1/pools/").json()
    assert [p["name"] for p in listed["results"]] == ["notebooks"]


def test_sizes_out_of_order_answer_400_naming_the_field(api_as, alice, catalog):
    api = api_as(alice)
    answer = api.post("/api/v1/pools/", pool_body(min_size=3, desired=2), format="json")
    assert answer.status_code == 400
    assert answer.json()["code"] == "desired_out_of_range"
    assert "desired must be between min_size 3 and max_size 6" in answer.json()["detail"]
    answer = api.post("/api/v1/pools/", pool_body(max_size=65), format="json")
    assert answer.status_code == 400 and "max_size" in answer.json()["fields"]
    answer = api.post("/api/v1/pools/", pool_body(owner="bob"), format="json")
    assert answer.status_code == 400 and answer.json()["code"] == "unknown_field"
    answer = api.post("/api/v1/pools/", pool_body(ssh_public_key="ssh-rsa nope"), format="json")
    assert answer.status_code == 400 and "ssh_public_key" in answer.json()["fields"]


def test_a_second_live_pool_of_the_same_name_is_a_conflict(api_as, alice, catalog):
    api = api_as(alice)
    assert api.post("/api/v1/pools/", pool_body(), format="json").status_code == 201
    again = api.post("/api/v1/pools/", pool_body(), format="json")
    assert again.status_code == 409 and again.json()["code"] == "name_taken"


def test_patch_changes_desired_and_the_mix_within_min_and_max(api_as, alice, make_pool):
    pool = make_pool()
    api = api_as(alice)
    answer = api.patch(
        f"/api/v1/pools/{pool.pk}/", {"desired": 5, "spot_percent": 80}, format="json"
    )
    assert answer.status_code == 200, answer.json()
    assert (answer.json()["desired"], answer.json()["spot_percent"]) == (5, 80)
    assert answer.json()["events"][0]["kind"] == "changed"
    answer = api.patch(f"/api/v1/pools/{pool.pk}/", {"desired": 9}, format="json")
    assert answer.status_code == 400 and answer.json()["code"] == "desired_out_of_range"
    answer = api.patch(f"/api/v1/pools/{pool.pk}/", {"instance_type": "p5.48xlarge"}, format="json")
    assert answer.status_code == 400 and answer.json()["code"] == "unknown_field"


def test_bob_reads_alices_pool_but_cannot_change_it_and_carol_cannot_see_it(
    api_as, make_pool, bob, carol, fin
):
    pool = make_pool()
    assert api_as(bob).get(f"/api/v1/pools/{pool.pk}/").status_code == 200
    assert (
        api_as(bob).patch(f"/api/v1/pools/{pool.pk}/", {"desired": 3}, format="json").status_code
        == 403
    )
    assert api_as(fin).delete(f"/api/v1/pools/{pool.pk}/").status_code == 403
    assert api_as(carol).get(f"/api/v1/pools/{pool.pk}/").status_code == 404
    assert api_as(carol).get("/api/v1/pools/").json()["results"] == []


def test_delete_ends_the_pool_and_its_hosts(api_as, alice, make_pool, clock):
    pool = make_pool(desired=2)
    services.autoscale()
    answer = api_as(alice).delete(f"/api/v1/pools/{pool.pk}/")
    assert answer.status_code == 202 and answer.json()["status"] == "deleting"
    assert not pool.hosts.exclude(status="terminating").exists()
    pool.refresh_from_db()
    assert pool.status == Pool.Status.DELETING


def test_schedules_in_plain_words_with_next_runs(api_as, alice, make_pool, clock):
    pool = make_pool()
    api = api_as(alice)
    url = f"/api/v1/pools/{pool.pk}/schedules/"
    answer = api.post(
        url, {"cron": "0 9 * * 1-5", "timezone": "Asia/Shanghai", "desired": 6}, format="json"
    )
    assert answer.status_code == 201, answer.json()
    schedule = answer.json()
    assert schedule["description"] == "At 09:00, Monday through Friday (Asia/Shanghai): desired 6"
    assert schedule["next_runs"][0] == "2026-11-18T01:00:00+00:00"
    assert len(schedule["next_runs"]) == 3
    assert [s["id"] for s in api.get(url).json()["results"]] == [schedule["id"]]
    one = f"{url}{schedule['id']}/"
    assert api.patch(one, {"desired": 4}, format="json").json()["desired"] == 4
    assert api.get(f"/api/v1/pools/{pool.pk}/").json()["schedules"][0]["desired"] == 4
    assert api.delete(one).status_code == 204
    assert api.get(one).status_code == 404


def test_a_malformed_cron_or_unknown_zone_answers_400_saying_what_is_wrong(
    api_as, alice, make_pool
):
    pool = make_pool()
    api = api_as(alice)
    url = f"/api/v1/pools/{pool.pk}/schedules/"
    answer = api.post(url, {"cron": "0 9 * *", "desired": 2}, format="json")
    assert answer.status_code == 400 and answer.json()["code"] == "invalid_cron"
    assert "five fields" in answer.json()["detail"]
    answer = api.post(
        url, {"cron": "0 9 * * *", "timezone": "Europe/Atlantis", "desired": 2}, format="json"
    )
    assert answer.status_code == 400 and answer.json()["code"] == "unknown_timezone"
    answer = api.post(url, {"cron": "0 9 * * *"}, format="json")
    assert answer.status_code == 400 and answer.json()["code"] == "required"
    answer = api.post(url, {"cron": "0 9 * * *", "desired": 50}, format="json")
    assert answer.status_code == 400 and answer.json()["code"] == "out_of_range"


def test_events_list_the_refusal_with_its_reason(api_as, alice, ada, make_pool, projects, clock):
    quota_set(project=projects["vision-lab"], actor=ada, max_gpus=1)
    pool = make_pool(desired=3)
    services.autoscale()
    answer = api_as(alice).get(f"/api/v1/pools/{pool.pk}/events/")
    assert answer.status_code == 200
    kinds = [e["kind"] for e in answer.json()["results"]]
    assert "refused" in kinds
    refused = next(e for e in answer.json()["results"] if e["kind"] == "refused")
    assert refused["message"].startswith("quota holds pool at 1 of 3: ")
    body = api_as(alice).get(f"/api/v1/pools/{pool.pk}/").json()
    assert body["refusal_reason"].startswith("quota holds pool at 1 of 3: ")
    assert body["blocked_markets"] == ["on_demand"] and body["blocked_until"]


def test_a_pools_hosts_are_listed_by_pool_with_their_names(
    api_as, alice, catalog, clock, order_body
):
    api = api_as(alice)
    pool = api.post("/api/v1/pools/", pool_body(desired=2), format="json").json()
    services.autoscale()
    other = api.post("/api/v1/orders/", order_body(), format="json")
    assert other.status_code == 201, other.json()
    hosts = api.get(f"/api/v1/instances/?pool={pool['id']}").json()["results"]
    assert len(hosts) == 2 and {h["pool"] for h in hosts} == {pool["id"]}
    assert all(h["name"] == f"portal-{h['id'][:8]}" for h in hosts)
    everything = api.get("/api/v1/instances/").json()["results"]
    assert sorted(h["pool"] is None for h in everything) == [False, False, True]
    answer = api.get("/api/v1/instances/?pool=not-a-pool")
    assert answer.status_code == 400 and "pool" in answer.json()["fields"]
