"""Chat-template checks (scanner.formats.template.jinja): sandbox-escape constructs are found
from the
Jinja AST without rendering; ordinary chat templates stay clean."""

from __future__ import annotations

import json

import jinja2
import pytest
from _shared import CORPUS as _CORPUS

from scanner.core.context import ScanContext
from scanner.core.model import BytesBlob, Verdict
from scanner.formats.template import analyze_template
from scanner.formats.template.jinja import MAX_TEMPLATE_CHARS, check_template

CORPUS = _CORPUS / "files"

CHATML_TOOLS = """\
{%- if tools %}
{{- '<|im_start|>system\\n' }}
{%- for tool in tools %}{{- tool | tojson }}
{%- if not loop.last %}{{ '\\n' }}{% endif %}{%- endfor %}
{{- '<|im_end|>\\n' }}
{%- endif %}
{%- set system = messages | selectattr('role', 'equalto', 'system') | list %}
{%- for message in messages %}
  {%- if message.role == 'assistant' and message.tool_calls is defined %}
    {%- for call in message.tool_calls %}
      {{- '<tool_call>' ~ (call.function | tojson) ~ '</tool_call>' }}
    {%- endfor %}
  {%- elif message['content'] is string %}
    {{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}
  {%- else %}
    {{- raise_exception('content must be a string') }}
  {%- endif %}
  {%- if loop.index0 > 1000 %}{% break %}{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""

GENERATION_TAG = """\
{%- for message in messages -%}
{%- if message.role == 'assistant' -%}{% generation %}{{ message.content }}{% endgeneration %}
{%- else -%}{{ message.content }}{%- endif -%}
{%- endfor -%}
"""

MACRO_AND_NAMESPACE = """\
{%- macro render(m) -%}[{{ m.role | upper }}] {{ m.content | trim }}{%- endmacro -%}
{%- set ns = namespace(seen=false, n=0) -%}
{%- for m in messages | sort(attribute='role') -%}
{%- set ns.n = ns.n + 1 -%}{{ render(m) }}
{%- if m.role == 'system' %}{% set ns.seen = true %}{% endif %}
{%- endfor -%}
{{ strftime_now('%Y-%m-%d') if strftime_now is defined else '' }}
{{- messages|map(attribute='content')|join(' ') }}
{{ "%s items"|format(ns.n) }}{% do ns.update({}) if false %}{{ '<__media__>' }}
{{- message|attr('role') }}
"""


def _benign_corpus_templates() -> list[tuple[str, str]]:
    out = []
    for path in sorted(CORPUS.glob("benign/*/tokenizer_config.json")):
        text = json.loads(path.read_text()).get("chat_template")
        if isinstance(text, str):
            out.append((str(path), text))
    out.extend((str(p), p.read_text()) for p in sorted(CORPUS.glob("benign/*/*.jinja")))
    return out


@pytest.mark.parametrize("name,text", [
    ("chatml_tools", CHATML_TOOLS),
    ("generation_tag", GENERATION_TAG),
    ("macro_namespace", MACRO_AND_NAMESPACE),
    *_benign_corpus_templates(),
])
def test_ordinary_templates_are_clean(name: str, text: str) -> None:
    assert check_template("t.jinja", text) == []


MALICIOUS = [
    ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "'__class__'"),
    ("{{ cycler.__init__.__globals__.os.popen('true') }}", "'__globals__'"),
    ("{{ joiner.__init__.__globals__ }}", "'__init__'"),
    ("{{ lipsum.__globals__['os'] }}", "'__globals__'"),
    ("{{ namespace.__init__ }}", "'__init__'"),
    ("{{ lipsum | attr('__glo' ~ 'bals__') }}", "attr filter with attribute name '__globals__'"),
    ("{{ lipsum | attr('__glo' + 'bals__') }}", "attr filter with attribute name '__globals__'"),
    ("{% set n = '__class__' %}{{ x | attr(n) }}", "attribute name '__class__' (through 'n')"),
    ("{{ x | attr('_private') }}", "'_private'"),
    ("{{ x.mro() }}", "'mro'"),
    ("{{ x['__builtins__'] }}", "item '__builtins__'"),
    ("{{ self._TemplateReference__context }}", "'_TemplateReference__context'"),
    ("{{ self.foo }}", "attribute walk on global 'self'"),
    ("{{ cycler.next }}", "attribute walk on global 'cycler'"),
    ("{{ range['x'] }}", "item lookup on global 'range'"),
    ("{% include 'other.jinja' %}", "include tag"),
    ("{% import 'm.jinja' as m %}", "import tag"),
    ("{% from 'm.jinja' import x %}", "fromimport tag"),
    ("{% extends 'base.jinja' %}", "extends tag"),
    ("{{ messages | map(attribute='__class__') | list }}", "map filter with attribute name"),
    ("{{ messages | selectattr('__class__') | list }}", "selectattr filter"),
    ("{{ messages | sort(attribute='a.__dict__') }}", "sort filter"),
    ("{{ '{0.__class__}'.format(x) }}", "str.format"),
    ("{{ fmt.format(x) }}", "str.format"),
    ("{{ __builtins__ }}", "name '__builtins__'"),
    ("{{ g.gi_frame.f_globals }}", "'gi_frame'"),
    ("{% for m in messages %}{% generation %}{{ m.__class__ }}{% endgeneration %}{% endfor %}",
     "'__class__'"),
]


@pytest.mark.parametrize("text,evidence", MALICIOUS)
def test_sandbox_escape_constructs_are_malicious(text: str, evidence: str) -> None:
    findings = check_template("chat_template.jinja", text)
    assert [f.rule_id for f in findings] == ["template.sandbox_escape"]
    assert findings[0].verdict is Verdict.MALICIOUS
    assert findings[0].path == "chat_template.jinja"
    assert evidence in findings[0].evidence


def test_location_prefixes_evidence() -> None:
    findings = check_template("tiny.gguf", "{{ x.__class__ }}", location="tokenizer.chat_template")
    assert findings[0].path == "tiny.gguf"
    assert findings[0].evidence.startswith("tokenizer.chat_template: line 1:")


def test_evidence_names_the_line() -> None:
    findings = check_template("t", "{{ a }}\n{{ b }}\n{{ c.__class__ }}")
    assert "line 3:" in findings[0].evidence


def test_unparseable_template_is_malformed() -> None:
    findings = check_template("t", "{% for m in messages %}{{ m }}")
    assert [f.rule_id for f in findings] == ["template.unparseable"]
    assert findings[0].verdict is Verdict.MALFORMED


def test_unparseable_template_still_gets_regex_checks() -> None:
    findings = check_template("t", "{% if %}{{ lipsum.__globals__ }}")
    assert {f.rule_id for f in findings} == {"template.sandbox_escape", "template.unparseable"}


def test_deeply_nested_template_fails_closed() -> None:
    text = "{{ " + "(" * 50_000 + "1" + ")" * 50_000 + " }}"
    findings = check_template("t", text)
    assert findings and max(f.verdict for f in findings) >= Verdict.MALFORMED


def test_oversized_template_is_a_limit_finding() -> None:
    findings = check_template("t", " " * (MAX_TEMPLATE_CHARS + 1))
    assert [f.rule_id for f in findings] == ["scanner.limit_exceeded"]


def test_templates_are_never_compiled_or_rendered(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("template was compiled")

    monkeypatch.setattr(jinja2.Environment, "compile", refuse)
    monkeypatch.setattr(jinja2.Environment, "from_string", refuse)
    findings = check_template("t", "{{ cycler.__init__.__globals__.os.popen('true') }}")
    assert findings[0].rule_id == "template.sandbox_escape"


def test_analyze_template_blob_non_utf8_is_malformed() -> None:
    findings = analyze_template(ScanContext(), BytesBlob("chat_template.jinja", b"{{ \xff }}"))
    assert [f.rule_id for f in findings] == ["template.unparseable"]
    assert findings[0].offset == 3


def test_analyze_template_blob_malicious() -> None:
    blob = BytesBlob("chat_template.jinja", b"{{ lipsum.__globals__['os'] }}")
    assert analyze_template(ScanContext(), blob)[0].rule_id == "template.sandbox_escape"


def test_a_template_text_is_parsed_once_whatever_its_location(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The parse outcome is memoised by text (chat_template.jinja and tokenizer_config.json
    hold the same template); each location still prefixes its own evidence."""
    import scanner.formats.template.jinja as template

    monkeypatch.setattr(template, "_JUDGED", {})
    parsed: list[str] = []
    real_parse = template._ENV.parse

    def parse(text: str) -> jinja2.nodes.Template:
        parsed.append(text)
        return real_parse(text)

    monkeypatch.setattr(template._ENV, "parse", parse)
    text = "{{ x.__class__ }}"
    first = check_template("chat_template.jinja", text)
    second = check_template("tokenizer_config.json", text, location="/chat_template")
    assert parsed == [text]
    assert len(first) == 1 and first[0].evidence.startswith("line 1: ")
    assert second[0].evidence == "/chat_template: " + first[0].evidence
    assert second[0].path == "tokenizer_config.json" and first[0].verdict is Verdict.MALICIOUS
    broken = "{% for %}"
    assert check_template("a", broken)[0].evidence.startswith("TemplateSyntaxError")
    assert check_template("b", broken, location="k")[0].evidence.startswith("k: Template")
    assert parsed == [text, broken]
