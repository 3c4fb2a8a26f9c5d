"""Shared MIG hosts' slices: a host's fixed layout (every GPU split alike, set again only while
empty), placing a slice on the first laid-out host of its type and profile in the holder's
project that has room, never on a host that is leaving or another project's, never one slice to two
holders (threads placing at once on PostgreSQL), in the same queries for 2 hosts as for 40."""

from __future__ import annotations

import threading

import pytest
from django.db import close_old_connections, connection
from django.test.utils import CaptureQueriesContext

from instances.models import Instance, MigProfile, MigSlot
from instances.services.mig import mig_layout_set, mig_slice_place, mig_slice_release
from portal.lib.errors import Conflict
from tests.bench.bench_orders import host_records

S = Instance.Status


@pytest.fixture
def rows(catalog, projects, alice):
    """Host records of ``n`` in a project, of a type, in a status, as fast as the ORM makes
    them (an order to hold them; no cloud)."""

    def make(n: int, *, kind="p4d.24xlarge", project="vision-lab", status=S.RUNNING):
        return host_records(alice, projects[project], n, kind=kind, status=status)

    return make


@pytest.fixture
def one_g():
    return MigProfile.objects.get(gpu_model="A100", gpu_memory_gib=40, name="1g.5gb")


@pytest.mark.django_db
def test_a_hosts_layout_splits_every_gpu_alike_and_changes_only_when_empty(rows, one_g):
    host = rows(1)[0]
    slots = mig_layout_set(host=host, profile=one_g)
    assert len(slots) == 8 * 7  # a p4d's eight A100s, seven 1g.5gb each
    assert {(s.gpu_index, s.index) for s in slots} == {(g, i) for g in range(8) for i in range(7)}
    assert len({s.device_uuid for s in slots}) == 56
    assert all(s.device_uuid.startswith("MIG-") for s in slots)
    three = MigProfile.objects.get(gpu_model="A100", gpu_memory_gib=40, name="3g.20gb")
    holder = rows(1, kind="p4d.24xlarge")[0]
    assert mig_slice_place(holder=holder, profile=one_g).host == host
    with pytest.raises(Conflict, match="in use"):
        mig_layout_set(host=host, profile=three)
    mig_slice_release(holder=holder)
    assert len(mig_layout_set(host=host, profile=three)) == 8 * 2
    h100 = MigProfile.objects.get(gpu_model="H100", name="1g.10gb")
    with pytest.raises(Conflict, match=r"has no MIG profile 1g\.10gb"):
        mig_layout_set(host=host, profile=h100)


@pytest.mark.django_db
def test_slices_fill_the_first_laid_out_host_first_and_a_retry_keeps_its_slice(rows, one_g):
    old, new = rows(2)
    for host in (old, new):
        mig_layout_set(host=host, profile=one_g)
    holders = rows(57)
    placed = [mig_slice_place(holder=h, profile=one_g) for h in holders]
    assert [slot.host for slot in placed[:56]] == [old] * 56
    assert placed[56].host == new and (placed[56].gpu_index, placed[56].index) == (0, 0)
    assert mig_slice_place(holder=holders[3], profile=one_g) == placed[3]  # a retry
    assert mig_slice_release(holder=holders[3]) is True
    assert mig_slice_release(holder=holders[3]) is False
    again = mig_slice_place(holder=rows(1)[0], profile=one_g)
    assert (again.host, again.gpu_index, again.index) == (old, 0, 3)


@pytest.mark.django_db
def test_no_slice_on_a_leaving_host_another_projects_or_another_profiles(rows, one_g):
    leaving = rows(1, status=S.TERMINATING)[0]
    theirs = rows(1, project="nlp-lab")[0]
    two_g = MigProfile.objects.get(gpu_model="A100", gpu_memory_gib=40, name="2g.10gb")
    other_profile = rows(1)[0]
    mig_layout_set(host=leaving, profile=one_g)
    mig_layout_set(host=theirs, profile=one_g)
    mig_layout_set(host=other_profile, profile=two_g)
    assert mig_slice_place(holder=rows(1)[0], profile=one_g) is None  # the caller launches one
    assert mig_slice_place(holder=rows(1)[0], profile=two_g).host == other_profile


@pytest.mark.django_db
def test_placing_costs_the_same_queries_for_two_hosts_as_for_forty(rows, one_g):
    def cost() -> int:
        holder = rows(1)[0]
        with CaptureQueriesContext(connection) as captured:
            assert mig_slice_place(holder=holder, profile=one_g) is not None
        return len(captured.captured_queries)

    for host in rows(2):
        mig_layout_set(host=host, profile=one_g)
    few = cost()
    for host in rows(38):
        mig_layout_set(host=host, profile=one_g)
    # The savepoint and its release, the holder locked, its slot if any, a free slot locked,
    # taken, and the holder told its host.
    assert cost() == few <= 7


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
def test_threads_placing_at_once_never_give_one_slice_to_two(rows, one_g):
    for host in rows(2):
        mig_layout_set(host=host, profile=one_g)
    holders = rows(150)  # 112 slices for 150 holders: some find none
    chunks = [holders[i::6] for i in range(6)]
    errors: list[BaseException] = []

    def place(mine: list[Instance]) -> None:
        try:
            for holder in mine:
                mig_slice_place(holder=holder, profile=one_g)
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=place, args=(chunk,)) for chunk in chunks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    taken = MigSlot.objects.filter(holder__isnull=False)
    assert taken.count() == 112
    assert len(set(taken.values_list("holder_id", flat=True))) == 112
