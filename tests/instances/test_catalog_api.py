"""GET /api/v1/instance-types/ and /api/v1/images/: filters, errors, compatibility."""

from __future__ import annotations

from decimal import Decimal

import pytest

URL = "/api/v1/instance-types/"


@pytest.fixture
def as_alice(api_as, alice, catalog):
    return api_as(alice)


def names(response) -> set[str]:
    assert response.status_code == 200, response.content
    return {row["name"] for row in response.json()["results"]}


def test_catalog_lists_every_offered_type_with_exact_prices(as_alice, catalog):
    body = as_alice.get(URL).json()
    assert body["count"] == len(catalog)
    p5 = next(row for row in body["results"] if row["name"] == "p5.48xlarge")
    assert p5["on_demand_price_per_hour"] == "98.320000"
    assert p5["price_per_gpu_hour"] == "12.290000"
    assert p5["gpu_model"] == "H100" and p5["gpu_count"] == 8
    assert p5["total_gpu_memory_gib"] == 640
    assert p5["efa"] is True
    assert "7g.80gb" in p5["mig_profiles"]
    assert "tf-2.11-cuda11.2" not in p5["compatible_images"]
    assert "tf-2.17-cuda12.3" in p5["compatible_images"]


def test_one_type_by_its_name(as_alice):
    response = as_alice.get(URL + "g6.xlarge/")
    assert response.status_code == 200
    assert response.json()["gpu_model"] == "L4"
    assert as_alice.get(URL + "x9.huge/").status_code == 404


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("gpu_model=H100", {"p5.48xlarge"}),
        ("gpu_model=h100", {"p5.48xlarge"}),
        ("gpu_model=A100", {"p4d.24xlarge", "p4de.24xlarge"}),
        ("gpu_model=H100&gpu_model=H200", {"p5.48xlarge", "p5e.48xlarge"}),
        (
            "min_gpu_memory_gib=80",
            {
                "p4de.24xlarge",
                "p5.48xlarge",
                "p5e.48xlarge",
                "gn-a800.32xlarge",
                "gn-h800.48xlarge",
            },
        ),
        ("min_gpu_memory_gib=100", {"p5e.48xlarge"}),
        ("gpu_count=4", {"g5.12xlarge", "g6.12xlarge"}),
        ("min_gpu_count=8&gpu_model=A800", {"gn-a800.32xlarge"}),
        ("max_price=1.00", {"g6.xlarge"}),
        ("max_price=1.006", {"g6.xlarge", "g5.xlarge"}),
        ("spot_offered=false", {"p5e.48xlarge", "gn-h800.48xlarge"}),
    ],
)
def test_each_filter_alone(as_alice, query, expected):
    assert names(as_alice.get(f"{URL}?{query}")) == expected


def test_filters_combine(as_alice):
    query = "min_gpu_memory_gib=80&spot_offered=true&max_price=50&min_gpu_count=8"
    assert names(as_alice.get(f"{URL}?{query}")) == {"p4de.24xlarge", "gn-a800.32xlarge"}
    query = "gpu_model=H100&gpu_model=H800&spot_offered=true"
    assert names(as_alice.get(f"{URL}?{query}")) == {"p5.48xlarge"}


def test_ordering_by_price_per_gpu_hour(as_alice):
    rows = as_alice.get(f"{URL}?ordering=price_per_gpu_hour&page_size=100").json()["results"]
    per_gpu = [Decimal(row["price_per_gpu_hour"]) for row in rows]
    assert per_gpu == sorted(per_gpu)
    rows = as_alice.get(f"{URL}?ordering=-gpu_memory").json()["results"]
    assert rows[0]["name"] == "p5e.48xlarge"


@pytest.mark.parametrize(
    ("query", "field", "says"),
    [
        ("gpu_model=Z80", "gpu_model", "gpu_model accepts A100, A10G, A800, H100"),
        ("min_gpu_memory_gib=lots", "min_gpu_memory_gib", "Enter a number of GiB per GPU"),
        ("max_price=-1", "max_price", "Must be 0 or more"),
        ("max_price=cheap", "max_price", "Enter a price in dollars per hour"),
        ("gpu_count=1.5", "gpu_count", "Enter a whole number of GPUs"),
        ("gpu_count=0", "gpu_count", "Must be 1 or more"),
        ("spot_offered=maybe", "spot_offered", "spot_offered accepts true or false"),
        ("ordering=colour", "ordering", "ordering accepts price"),
    ],
)
def test_bad_filter_values_get_a_400_naming_the_parameter(as_alice, query, field, says):
    response = as_alice.get(f"{URL}?{query}")
    assert response.status_code == 400
    body = response.json()
    assert body["code"] in {"invalid", "invalid_choice", "min_value"}
    assert field in body["fields"]
    assert says in body["detail"]
    assert body["detail"].startswith(f"{field}:")


def test_images_list_their_stack(as_alice):
    rows = as_alice.get("/api/v1/images/").json()["results"]
    tf217 = next(row for row in rows if row["name"] == "tf-2.17-cuda12.3")
    assert (tf217["cuda_version"], tf217["cudnn_version"]) == ("12.3", "8.9")
    assert tf217["provider_image_ids"]["us-east-1"].startswith("ami-")


def test_images_that_fit_an_instance_type(as_alice):
    fit_h100 = names(as_alice.get("/api/v1/images/?instance_type=p5.48xlarge"))
    fit_a100 = names(as_alice.get("/api/v1/images/?instance_type=p4d.24xlarge"))
    assert "tf-2.11-cuda11.2" not in fit_h100  # CUDA 11.2 predates Hopper
    assert "tf-2.11-cuda11.2" in fit_a100
    assert "tf-2.20-cuda12.5" in fit_h100


def test_images_for_an_unknown_type_is_a_400(as_alice):
    response = as_alice.get("/api/v1/images/?instance_type=x9.huge")
    assert response.status_code == 400
    assert "instance_type accepts" in response.json()["detail"]


def test_schema_and_docs_are_served_without_a_cdn(client, alice, catalog):
    client.force_login(alice)
    schema = client.get("/api/v1/schema/?format=json")
    assert schema.status_code == 200
    assert "/api/v1/instance-types/" in schema.json()["paths"]
    docs = client.get("/api/v1/docs/")
    assert docs.status_code == 200
    html = docs.content.decode()
    assert "cdn.jsdelivr" not in html and "unpkg" not in html
