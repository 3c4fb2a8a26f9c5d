from django.db import migrations, models

# The shipped images file as it was when images began to say which JupyterLab they ship.
SHIPPED = {
    "tf-2.20-cuda12.5": "4.2",
    "tf-2.19-cuda12.5": "4.2",
    "tf-2.17-cuda12.3": "4.1",
    "tf-2.15-cuda12.2": "4.0",
}


def from_the_images_file(apps, schema_editor):
    """Images already in the database learn theirs from the shipped file of the time (then
    sync_catalog keeps them as the file says); an image it does not name ships none."""
    Image = apps.get_model("instances", "Image")
    for name, version in SHIPPED.items():
        Image.objects.filter(name=name).update(jupyterlab_version=version)


class Migration(migrations.Migration):
    dependencies = [("instances", "0021_notebooks")]

    operations = [
        migrations.AddField(
            model_name="image",
            name="jupyterlab_version",
            field=models.CharField(
                blank=True,
                help_text="The JupyterLab the image ships, e.g. 4.2; empty for none. Only hosts "
                "of an image with one open a notebook through the portal.",
                max_length=16,
            ),
        ),
        migrations.RunPython(from_the_images_file, migrations.RunPython.noop),
    ]
