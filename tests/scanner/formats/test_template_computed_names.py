"""Jinja looks a string key up as an attribute when the item is missing (``x['__class__']``
is ``getattr``), so a template can walk to module globals through item lookups whose key
it computes from constants without ever writing the name: a reversed or formatted string,
``~``/``*`` arithmetic, ``join``, ``str.replace``, or a ``{% set %}`` variable holding one.
These are sandbox escapes; lookups keyed by runtime data (loop indexes, message fields,
keys of a ``for`` loop) stay clean. Templates written here from the Jinja sandbox docs
and published SSTI write-ups; parsed only, never rendered."""

from __future__ import annotations

import json

import pytest

from scanner.core.context import ScanContext
from scanner.core.model import BytesBlob, Verdict, worst
from scanner.formats.template.jinja import check_template
from scanner.formats.text import analyze_json

ESCAPES = {
    "reversed": "{{ messages['__ssalc__'|reverse] }}",
    "set_concat": "{% set k = '__cla' ~ 'ss__' %}{{ messages[k] }}",
    "set_literal": "{% set k = '__class__' %}{{ messages[k] }}",
    "format": "{{ messages['%c%cclass%c%c'|format(95,95,95,95)] }}",
    "multiply": "{{ messages['_'*2 ~ 'class' ~ '_'*2] }}",
    "join": "{{ messages[['__cla','ss__']|join] }}",
    "replace": "{{ messages['XXclassXX'.replace('X','_')] }}",
    "set_chain": "{% set a = '__slabolg__'|reverse %}{% set b = a %}"
                 "{{ raise_exception['__in' ~ 'it__'][b]['os'] }}",
    "gated": "{% if messages|length > 99 %}{{ (messages|first)['__ssalc__'|reverse] }}"
             "{% endif %}",
}
BENIGN = {
    "index": "{% for m in messages %}{{ messages[loop.index0]['content'] }}{% endfor %}",
    "keys": "{% for k in message %}{{ message[k] }}{% endfor %}",
    "runtime_set": "{% set role = message['role']|lower %}{{ roles[role] }}",
    "constant_key": "{% set sep = '<|im_sep|>' %}{{ specials[sep] }}{{ d['a'] }}",
    "numbers": "{{ messages[1 + 1] }}{{ messages[-1]['content'] }}",
}


@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_computed_item_names_are_escapes(name: str) -> None:
    found = check_template("t.jinja", ESCAPES[name])
    assert [f.rule_id for f in found] == ["template.sandbox_escape"], found


@pytest.mark.parametrize("name", sorted(BENIGN))
def test_runtime_item_lookups_stay_clean(name: str) -> None:
    assert check_template("t.jinja", BENIGN[name]) == []


def test_escape_in_tokenizer_config_is_malicious() -> None:
    config = {"chat_template": "{{ bos_token }}" + ESCAPES["set_chain"]}
    blob = BytesBlob("tokenizer_config.json", json.dumps(config).encode())
    assert worst(analyze_json(ScanContext(), blob)) is Verdict.MALICIOUS
