"""The release table's version handling: PEP 440 order, and what --force does with
a release the table does not list (pre-releases get the previous release's rules)."""

from __future__ import annotations

import pytest

from sgl_eagle_ext.common import releases
from sgl_eagle_ext.common.errors import UserError

key = releases.version_key


def test_versions_sort_as_pep_440():
    order = ["0.5.10rc1", "0.5.10", "0.5.10.post1", "0.5.11.dev0", "0.5.11", "0.5.100"]
    assert sorted(order, key=key) == order
    assert key("0.5.10rc1") < key("0.5.10.post1")  # the old key sorted them equal
    assert [key(r.version) for r in releases.RELEASES] == sorted(
        key(r.version) for r in releases.RELEASES
    )


@pytest.mark.parametrize(
    "version, rules",
    [
        ("0.5.21rc1", "0.5.19"),  # a pre-release: the previous release's rules, not 0.5.21's
        ("0.5.21.dev3", "0.5.19"),
        ("0.5.22", "0.5.21"),
        ("0.5.23.post1", "0.5.23"),
        ("0.5.23+cu130", "0.5.23"),
        ("0.6.0", "0.5.23"),
        ("0.4.0", "0.5.10.post1"),  # nothing older: the oldest rules
    ],
)
def test_force_uses_the_newest_older_release(version, rules):
    with pytest.raises(UserError, match="--force"):
        releases.resolve(version)
    row, how = releases.resolve(version, force=True)
    assert row.version == rules and f"using the rules of {rules}" in how


def test_a_version_that_is_no_version_is_a_user_error():
    with pytest.raises(UserError, match="not a version number"):
        releases.resolve("latest", force=True)


def test_first_release_names_the_fix():
    assert releases.first_release(lambda r: not r.graph_resets_aux_layers).version == "0.5.13.post1"
    assert releases.first_release(lambda r: r.version == "9") is None
