"""common/table.py: the one fixed-width table printer."""

from __future__ import annotations

import pytest

from sgl_eagle_ext.common.table import Col, L, Table


def test_render_aligns_formats_and_widens_to_fit():
    t = Table(L("phase", 8), Col("ms", 6, ".2f"), Col("share", 7, ".1f", "%"), indent="  ")
    lines = t.render([("draft", 0.984, 3.94), ("verify_forward", 23.4, 93.2), ("other", None, 0)])
    assert lines == [
        "  phase              ms   share",
        "  draft            0.98    3.9%",
        "  verify_forward  23.40   93.2%",  # the long name widened its column
        "  other               -    0.0%",  # None prints as "-"
    ]
    widths = {len(line) for line in lines}
    assert len(widths) == 1  # every line equally long: columns line up


def test_row_keeps_the_given_widths_for_streamed_tables():
    t = Table(Col("conc", 5, "g"), Col("tok/s", 9, ".1f"), L("status", sep="  "))
    assert t.header() == " conc     tok/s  status"
    assert t.row(1.0, 81.666, "ok") == "    1      81.7  ok"
    assert t.row(16, None, "SERVER DIED") == "   16         -  SERVER DIED"
    assert len(t.header()) == len(t.row(2, 1.0, "ok")) - len("ok") + len("status")


def test_separators_rule_and_strings_as_given():
    t = Table(Col("a", 3), Col("b", 4, sep=" | "), L("note", sep=" | "))
    assert t.render([(1, "x", "")], rule="-") == [
        "  a |    b | note",
        "-" * len("  a |    b | note"),
        "  1 |    x |",  # trailing blanks dropped
    ]
    assert t.render([(1, 2, 3)], header=False) == ["  1 |    2 | 3"]


def test_matches_the_hand_printed_layout_it_replaced():
    # report's phase table, as printed before the table printer: same text
    old = f"  {'phase':14}{'mean ms':>10}{'p50 ms':>10}{'p90 ms':>10}{'share':>9}"
    row = f"  {'draft':14}{0.98:10.2f}{0.97:10.2f}{1.10:10.2f}{3.9:8.1f}%"
    t = Table(
        L("phase", 14),
        *(Col(n, 10, ".2f", sep="") for n in ("mean ms", "p50 ms", "p90 ms")),
        Col("share", 9, ".1f", "%", sep=""),
        indent="  ",
    )
    assert t.render([("draft", 0.98, 0.97, 1.10, 3.9)]) == [old, row]


def test_bad_tables_are_refused():
    with pytest.raises(ValueError):
        Table()
    with pytest.raises(ValueError):
        Col("x", align="=")
    with pytest.raises(ValueError, match="2 cells for 3 columns"):
        Table(Col("a"), Col("b"), Col("c")).row(1, 2)


def test_a_centred_column():
    t = Table(Col("n", 2, "d"), Col("cell", 8, align="^", sep=" |"))
    assert t.render([(1, "ab")], rule="-") == [" n |  cell", "-" * 10, " 1 |   ab"]
