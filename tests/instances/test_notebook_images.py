"""Which images run JupyterLab: the images file says (``jupyterlab_version``), the catalog API
and the order form show it, and a host of an image without one is not offered a notebook: the
host page says why and the API refuses with the same sentence, opening nothing."""

from __future__ import annotations

import pytest

from instances.models import Image, Notebook
from instances.services import image_upsert
from instances.services.catalog import IMAGE_FILE_FIELDS

pytestmark = [pytest.mark.django_db]

OLD = "tf-2.11-cuda11.2"  # the shipped image without JupyterLab (TensorFlow 2.11, CUDA 11.2)


@pytest.fixture
def agents_on(settings):
    """The simulated cloud's hosts run what they are asked to (notebooks among it)."""
    settings.PORTAL_SIMULATED_AGENTS = True


def test_the_shipped_images_say_which_jupyterlab_they_run(catalog, api_as, alice):
    shipped = dict(Image.objects.values_list("name", "jupyterlab_version"))
    assert shipped["tf-2.20-cuda12.5"] == "4.2" and shipped["tf-2.17-cuda12.3"] == "4.1"
    assert shipped[OLD] == ""
    listed = {row["name"]: row for row in api_as(alice).get("/api/v1/images/").json()["results"]}
    assert listed["tf-2.17-cuda12.3"]["jupyterlab_version"] == "4.1"
    assert listed[OLD]["jupyterlab_version"] == ""


def test_an_images_file_that_names_no_jupyterlab_means_none(catalog):
    image = Image.objects.get(name="tf-2.17-cuda12.3")
    row = {name: getattr(image, name) for name in IMAGE_FILE_FIELDS}
    image, said = image_upsert(row={**row, "name": "tf-2.17-cuda12.3"})
    assert said == "updated" and image.jupyterlab_version == ""
    image, said = image_upsert(row={**row, "name": "tf-2.17-cuda12.3", "jupyterlab_version": "4.1"})
    assert said == "updated" and image.jupyterlab_version == "4.1"


def test_the_order_form_names_each_images_jupyterlab(catalog, alice, client):
    client.force_login(alice)
    page = client.get("/catalog/g5.xlarge/order/").content.decode()
    assert "Python 3.12 · JupyterLab 4.1" in page
    assert "Python 3.10 · JupyterLab" not in page  # tf-2.11 ships none


def test_a_host_of_an_image_without_jupyterlab_is_refused_with_the_reason(
    agents_on, running_host, alice, api_as, client
):
    host = running_host(image=Image.objects.get(name=OLD))
    url = f"/api/v1/instances/{host.pk}/notebook/"
    answer = api_as(alice).post(url)
    assert answer.status_code == 409, answer.content
    body = answer.json()
    assert body["code"] == "image_without_jupyterlab"
    assert f"image {OLD} has no JupyterLab" in body["detail"]
    assert "tf-2.17-cuda12.3" in body["detail"] and OLD not in body["detail"].split("(")[1]
    assert not Notebook.objects.exists()
    # The host page offers no button, and says the same.
    client.force_login(alice)
    page = client.get(f"/hosts/{host.pk}/").content.decode()
    assert "Start JupyterLab" not in page
    assert f"image {OLD} has no JupyterLab" in page
    # The page's form, posted anyway, is refused the same way and opens nothing.
    client.post(f"/hosts/{host.pk}/notebook/")
    assert not Notebook.objects.exists()


def test_a_host_of_an_image_with_jupyterlab_offers_the_button(
    agents_on, running_host, alice, client
):
    host = running_host()
    client.force_login(alice)
    page = client.get(f"/hosts/{host.pk}/").content.decode()
    assert "Start JupyterLab" in page and "has no JupyterLab" not in page


def test_the_host_panels_poll_builds_no_cloud_client(
    agents_on, running_host, alice, client, monkeypatch
):
    """Each open host page polls its panel every few seconds: whether to offer a notebook is
    the cloud class's answer, not a client built per poll (a boto3 client on EC2)."""
    from instances.providers.simulated import SimulatedProvider

    host = running_host()
    client.force_login(alice)

    def no_client(self):
        raise AssertionError("the poll built a cloud client")

    monkeypatch.setattr(SimulatedProvider, "__init__", no_client)
    panel = client.get(f"/hosts/{host.pk}/panel/")
    assert panel.status_code == 200 and "Start JupyterLab" in panel.content.decode()
