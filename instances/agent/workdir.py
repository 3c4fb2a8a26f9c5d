"""The working folder a job's command starts in, put in the job's folder on a host before its
first run there (installed beside portal_agent.py, which imports it): the files of the tar
archive uploaded with the job, or of the git repository (and ref) the job names. A later run
on the same host, or an agent restarted, finds it there and leaves it as the last run left it.

Standard library only, and Python 3.8 or later, like the agent."""

import base64
import io
import os
import subprocess
import tarfile

DONE = ".portal-workdir"


def prepare(spec, folder, note):
    """Put the working folder ``spec`` describes in ``folder``, once; False (with a line in the
    run's log, through ``note``) when it could not be."""
    marker = os.path.join(folder, DONE)
    if not spec or os.path.exists(marker):
        return True
    try:
        if spec.get("tarball"):
            data = base64.b64decode(spec["tarball"])
            # The portal checked every member with the "data" filter when the job was
            # submitted; a Python that has the filter applies it again.
            safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as archive:
                archive.extractall(folder, **safe)  # noqa: S202 (members checked, above)
        elif spec.get("git"):
            # Into the job's folder, which already holds the run's log: init, fetch, checkout.
            for args in (
                ["init", "-q"],
                ["fetch", "-q", "--depth", "1", "--", spec["git"], spec.get("ref") or "HEAD"],
                ["checkout", "-q", "FETCH_HEAD"],
            ):
                subprocess.run(
                    ["git", "-C", folder, *args],
                    check=True,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    timeout=900,
                )
    except subprocess.CalledProcessError as error:
        reason = (error.stderr or b"").decode("utf-8", "replace").strip()[-500:]
        step = error.args[1][3]  # git -C <folder> <step> ...
        note(f"the working folder could not be fetched: git {step} ({reason})")
        return False
    except (OSError, ValueError, tarfile.TarError, subprocess.SubprocessError) as error:
        note(f"the working folder could not be unpacked: {error!r}")
        return False
    open(marker, "w").close()
    return True
