"""Too-deep JSON/TOML is refused before the parser recurses (a parser that hits its
recursion limit lets the garbage collector's finalizers fail, and their tracebacks
reach stderr: the CI failure of stop 21)."""

import tomllib

import pytest

from sgl_eagle_ext.common import nesting
from sgl_eagle_ext.launcher import presets

L = nesting.LIMIT


def test_brackets_inside_strings_and_comments_do_not_count():
    s = '"' + "[" * 500 + '"'
    assert nesting.depth('{"a": ' + s + "}") == 1
    assert nesting.depth('{"a": "\\"[[[[" }') == 1  # an escaped quote does not end the string
    toml = f'x = \'{"[" * 500}\'\ny = """\n{"{" * 500}\n"""\n# {"[" * 500}\nz = [[1]]\n'
    assert nesting.depth(toml, toml=True) == 2
    nesting.check(toml, toml=True)
    assert tomllib.loads(toml)["z"] == [[1]]


def test_the_limit_is_inclusive():
    nesting.json_loads("[" * L + "]" * L)
    with pytest.raises(nesting.TooDeep):
        nesting.json_loads("[" * (L + 1) + "]" * (L + 1))
    with pytest.raises(ValueError):  # callers that catch ValueError catch it
        nesting.toml_loads("x = " + "[" * (L + 1) + "]" * (L + 1))


def test_a_deep_preset_never_reaches_the_parser(tmp_path, monkeypatch):
    def parser_entered(text):
        raise AssertionError("tomllib.loads was called on a too-deep text")

    monkeypatch.setattr(tomllib, "loads", parser_entered)
    f = tmp_path / "deep.toml"
    f.write_text("[server]\nx = " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(presets.UserError, match="nested too deeply"):
        presets.load(path=f)


def test_a_deep_sharegpt_line_is_one_clear_error(tmp_path):
    from sgl_eagle_ext.common.errors import UserError
    from sgl_eagle_ext.tools.bench import datasets

    f = tmp_path / "deep.jsonl"
    f.write_text('{"conversations": []}\n{"x": ' + "[" * 100 + "]" * 100 + "}\n")
    with pytest.raises(UserError, match=r"deep.jsonl:2: not valid JSON \(nested too deeply"):
        datasets.load_sharegpt(str(f))
