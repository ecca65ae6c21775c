"""Two text checks that backtracked quadratically on crafted values (red-team pass of issue
30): a chat template ``{{ '{' + 150k dots + '.format(1) }}`` took 60.6 s and a YAML value
of ``${`` repeated 200k times 68.6 s, both past the 60 s per-target limit, which nothing
checks inside one regular expression, and both then came back ``clean``. Each check is
now linear and gives the answer the old pattern gave (compared on generated strings)."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st
from scanner_helpers import scan

from scanner.formats.template.jinja import _format_reaches
from scanner.formats.yamlconf import _placed

OLD_FORMAT_FIELD = re.compile(r"\{[^{}]*[.\[][^{}]*\}")
OLD_PLACED = re.compile(r"\$\{\s*\.|\$\{[^}]*\.\.")


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="{}.[]a0 ", max_size=40))
def test_format_field_check_answers_as_the_old_pattern(text: str) -> None:
    assert _format_reaches(text) == (OLD_FORMAT_FIELD.search(text) is not None)


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="${}.a: \t", max_size=40))
def test_relative_interpolation_check_answers_as_the_old_pattern(text: str) -> None:
    assert _placed(text) == (OLD_PLACED.search(text) is not None)


def test_red_team_inputs_are_judged_without_a_quadratic_walk() -> None:
    """The red-team's inputs at their full size (each took over a minute before)."""
    assert not _format_reaches("{" + "." * 150_000)
    assert _format_reaches("{" + "." * 150_000 + "}")
    assert not _placed("${" * 200_000)
    assert _placed("${" * 200_000 + "..x}")
    template = "{{ '{" + "." * 150_000 + "'.format(1) }}"
    assert scan("chat_template.jinja", template.encode()) == []  # no field: nothing reached
    target = 'a:\n  _target_: "' + "${" * 200_000 + '"\n'
    assert [f.rule_id for f in scan("config.yaml", target.encode())] == [
        "config.dynamic_target"]
