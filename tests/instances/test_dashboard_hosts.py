"""The dashboard's list of the viewer's live hosts: each by its name, and a way to the rest."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.django_db


def live_list(page: str) -> str:
    return re.search(r'data-testid="my-live-hosts">(.*?)</ul>', page, re.S).group(1)


def test_the_dashboard_names_each_host_not_only_its_type(clock, client, running_host, alice):
    hosts = [running_host(), running_host()]
    client.force_login(alice)
    listed = live_list(client.get("/dashboard/").content.decode())
    for host in hosts:
        assert f'href="/hosts/{host.pk}/">{host.name}</a>' in listed
    assert 'data-testid="all-my-hosts"' not in listed


def test_the_dashboard_links_to_all_live_hosts_beyond_the_six_it_lists(
    clock, client, running_host, alice
):
    for _ in range(8):
        running_host()
    client.force_login(alice)
    page = client.get("/dashboard/").content.decode()
    listed = live_list(page)
    assert listed.count('href="/hosts/') == 6 + 1
    assert '<a href="/hosts/" data-testid="all-my-hosts">All 8 on My hosts</a>' in listed
    assert '<a href="/hosts/">8 live hosts of yours</a>' in page
