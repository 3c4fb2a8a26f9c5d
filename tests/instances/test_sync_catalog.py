"""manage.py sync_catalog: types from the cloud (EC2 via moto, or simulated), prices from a file."""

from __future__ import annotations

import io
import json
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from moto import mock_aws

from instances.models import Image, InstanceType
from instances.services import image_save


@pytest.fixture
def aws(monkeypatch, settings):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "testing")
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    settings.AWS_ENDPOINT_URL = ""
    settings.PORTAL_REGION = "us-east-1"
    with mock_aws():
        yield


def sync(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("sync_catalog", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def price_file(tmp_path, prices: dict[str, str]):
    path = tmp_path / "prices.json"
    path.write_text(
        json.dumps(
            {
                "source": "test price sheet",
                "as_of": "2026-11-01",
                "prices": {name: {"on_demand": value} for name, value in prices.items()},
            }
        )
    )
    return str(path)


def test_ec2_sync_reads_gpu_info_from_describe_instance_types(
    empty_catalog, aws, settings, tmp_path
):
    settings.AWS_EC2_INSTANCE_TYPES = ["g5.xlarge", "p4d.24xlarge", "p5.48xlarge", "g6.xlarge"]
    prices = price_file(
        tmp_path,
        {
            "g5.xlarge": "1.006",
            "p4d.24xlarge": "32.7726",
            "p5.48xlarge": "98.32",
            "g6.xlarge": "0.8048",
        },
    )
    out, _ = sync("--provider", "ec2", "--prices", prices)
    assert "4 created" in out
    p4d = InstanceType.objects.get(provider="ec2", name="p4d.24xlarge")
    assert (p4d.gpu_model, p4d.gpu_count, p4d.gpu_memory_gib) == ("A100", 8, 40)
    assert p4d.gpu_architecture == "8.0"
    assert p4d.vcpus == 96 and p4d.efa is True
    assert p4d.on_demand_price_per_hour == Decimal("32.7726")
    assert p4d.price_source == "test price sheet"
    p5 = InstanceType.objects.get(provider="ec2", name="p5.48xlarge")
    assert (p5.gpu_model, p5.gpu_architecture) == ("H100", "9.0")
    assert InstanceType.objects.get(provider="ec2", name="g6.xlarge").gpu_model == "L4"
    assert InstanceType.objects.get(provider="ec2", name="g5.xlarge").gpu_model == "A10G"


def test_ec2_sync_skips_unknown_types_and_types_without_a_price(
    empty_catalog, aws, settings, tmp_path
):
    settings.AWS_EC2_INSTANCE_TYPES = ["g5.xlarge", "zz9.plural", "g6.xlarge"]
    out, err = sync("--provider", "ec2", "--prices", price_file(tmp_path, {"g5.xlarge": "1.006"}))
    assert "1 created" in out
    assert "skipped g6.xlarge: no list price" in err
    assert not InstanceType.objects.filter(name="zz9.plural").exists()


def test_a_new_price_file_updates_prices_and_nothing_else(empty_catalog, aws, settings, tmp_path):
    settings.AWS_EC2_INSTANCE_TYPES = ["g5.xlarge"]
    sync("--provider", "ec2", "--prices", price_file(tmp_path, {"g5.xlarge": "1.006"}))
    out, _ = sync("--provider", "ec2", "--prices", price_file(tmp_path, {"g5.xlarge": "0.95"}))
    assert "1 updated" in out
    row = InstanceType.objects.get(name="g5.xlarge")
    assert row.on_demand_price_per_hour == Decimal("0.95")
    out, _ = sync("--provider", "ec2", "--prices", price_file(tmp_path, {"g5.xlarge": "0.95"}))
    assert "1 unchanged" in out


def test_types_the_cloud_no_longer_lists_are_deactivated_not_deleted(db, catalog, tmp_path):
    prices = price_file(tmp_path, {"g5.xlarge": "1.006"})
    out, err = sync("--prices", prices)
    assert "skipped p5.48xlarge: no list price" in err
    assert "deactivated" in out
    assert set(InstanceType.objects.offered().values_list("name", flat=True)) == {"g5.xlarge"}
    assert InstanceType.objects.filter(name="p5.48xlarge", is_active=False).exists()


def test_a_negative_price_in_the_file_is_refused(empty_catalog, tmp_path):
    with pytest.raises(CommandError, match="negative"):
        sync("--prices", price_file(tmp_path, {"g5.xlarge": "-1"}))


def test_an_unknown_provider_is_refused_with_the_choices(empty_catalog):
    with pytest.raises(CommandError, match="PORTAL_PROVIDER accepts ec2, simulated"):
        sync("--provider", "azure")


def images_file(tmp_path, ids: dict[str, str], name: str = "tf-2.20-cuda12.5") -> str:
    path = tmp_path / "images.json"
    row = {
        "name": name,
        "tensorflow_version": "2.20.0",
        "cuda_version": "12.5",
        "cudnn_version": "9.3",
        "nccl_version": "2.25",
        "python_version": "3.12",
        "min_driver_version": "555.42.02",
        "gpu_architectures": ["8.0", "8.6", "8.9", "9.0"],
        "provider_image_ids": ids,
    }
    path.write_text(json.dumps({"source": "our own AMIs", "as_of": "2026-11-01", "images": [row]}))
    return str(path)


def test_ec2_sync_leaves_out_image_ids_the_region_does_not_have(
    empty_catalog, aws, settings, tmp_path
):
    """The shipped images file names ids only the simulated cloud has: on EC2 they are named
    and left out, so an order is refused with a sentence instead of failing at launch."""
    settings.AWS_EC2_INSTANCE_TYPES = ["g5.xlarge"]
    prices = price_file(tmp_path, {"g5.xlarge": "1.006"})
    _, err = sync("--provider", "ec2", "--prices", prices)
    assert "image tf-2.20-cuda12.5: ami-0f2a4c6e8a0b1d220 does not exist in us-east-1" in err
    image = Image.objects.get(name="tf-2.20-cuda12.5")
    assert image.image_id_for("us-east-1") is None
    assert image.provider_image_ids["us-west-2"] == "ami-0a1b3d5f7a9c1e220"  # not checked here


def test_ec2_sync_keeps_an_image_id_the_region_has(empty_catalog, aws, settings, tmp_path):
    import boto3

    real = boto3.client("ec2", region_name="us-east-1").register_image(
        Name="our-tf", Architecture="x86_64", RootDeviceName="/dev/sda1"
    )["ImageId"]
    settings.AWS_EC2_INSTANCE_TYPES = ["g5.xlarge"]
    settings.PORTAL_IMAGE_FILE = images_file(tmp_path, {"us-east-1": real})
    _, err = sync("--provider", "ec2", "--prices", price_file(tmp_path, {"g5.xlarge": "1.006"}))
    assert "does not exist" not in err
    assert Image.objects.get(name="tf-2.20-cuda12.5").image_id_for("us-east-1") == real


def test_the_images_file_is_a_setting_and_an_option(empty_catalog, settings, tmp_path):
    settings.PORTAL_IMAGE_FILE = images_file(tmp_path, {"us-east-1": "ami-0ours"}, name="tf-ours")
    sync()
    assert set(Image.objects.values_list("name", flat=True)) == {"tf-ours"}
    other = tmp_path / "other"
    other.mkdir()
    shipped = "ami-0f2a4c6e8a0b1d220"  # an image the simulated cloud has
    sync("--images", images_file(other, {"us-east-1": shipped}, name="tf-other"))
    assert Image.objects.get(name="tf-other").image_id_for("us-east-1") == shipped


def test_sync_never_overwrites_an_image_id_an_admin_set(empty_catalog, settings):
    sync()
    image = Image.objects.get(name="tf-2.20-cuda12.5")
    image.image_id_overrides = {"us-east-1": "ami-0adminfix"}
    image_save(image=image)
    out, _ = sync()
    image.refresh_from_db()
    assert image.image_id_overrides == {"us-east-1": "ami-0adminfix"}
    assert image.image_id_for("us-east-1") == "ami-0adminfix"
    assert image.image_id_for("us-west-2") == image.provider_image_ids["us-west-2"]
    assert "0 created, 0 updated" in out.split("Images:")[1]


def test_an_admins_image_ids_must_be_one_id_per_region(empty_catalog):
    sync()
    image = Image.objects.get(name="tf-2.20-cuda12.5")
    for bad in (["ami-0x"], {"us-east-1": ""}, {"us-east-1": 7}):
        image.image_id_overrides = bad
        with pytest.raises(ValidationError) as refused:
            image_save(image=image)
        assert "one image id per region" in str(refused.value)
