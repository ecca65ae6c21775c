"""Chat-template sandbox escapes whose attribute names reach an item lookup through a name
the template binds (llama-cpp-python CVE-2024-34359: Jinja's ``getitem`` falls back to
``getattr`` for a string key the object lacks, so ``(0 or cycler)[c]`` with ``c`` bound to
``'__init__'`` walks to module globals). Every binding construct is followed: ``for``
targets, ``{% with %}``, set blocks, macro parameters (call sites and defaults),
``{% call %}`` bodies returned by ``caller()``, ``namespace(...)`` attributes, ``dict(k=...)``
keys, ``loop.cycle``, and ``map('attr', name)``. A key taken from render data on an object
the template builds itself cannot be judged, so it is ``template.unresolved_lookup``
(policy), never clean. Benign counterparts are the shapes real chat templates use (Llama 3,
Qwen, Mistral, Hermes, DeepSeek). Templates are parsed only, never rendered."""

from __future__ import annotations

import json
import struct

import pytest

from scanner.core.context import ScanContext
from scanner.core.model import BytesBlob, Verdict, worst
from scanner.formats.gguf import analyze_gguf
from scanner.formats.template import analyze_template
from scanner.formats.template.jinja import check_template
from scanner.formats.text import analyze_json

ESCAPE = "template.sandbox_escape"
UNRESOLVED = "template.unresolved_lookup"
GLOBALS = "(0 or cycler)"


def _rules(template: str) -> list[str]:
    return [f.rule_id for f in check_template("chat_template.jinja", template)]


def _evidence(template: str) -> str:
    return " ".join(f.evidence for f in check_template("chat_template.jinja", template))


# The red-team cases, verbatim (tokenizer_config.json ``chat_template``).
LOOP_VAR = ("{% for c in ['__init__'] %}{% for g in ['__globals__'] %}"
            "{{ (0 or cycler)[c][g].os.popen('id').read() }}{% endfor %}{% endfor %}")
MAP_ATTR = ("{{ ([cycler]|map('attr','__init__')|map('attr','__globals__')|first)"
            ".os.popen('id').read() }}")
DICT_KW = ("{{ (0 or cycler)[dict(__init__=0)|first][dict(__globals__=0)|first]"
           ".os.popen('id').read() }}")
MACRO = ("{% macro g(o, a) %}{{ o[a] }}{% endmacro %}"
         "{{ g(g(g(cycler, '__init__'), '__globals__'), 'os').popen('id').read() }}")
WITH = ("{% with i='__init__', g='__globals__' %}"
        "{{ (0 or cycler)[i][g]['os'].popen('id').read() }}{% endwith %}")
SET_BLOCK = ("{% set i %}__init__{% endset %}{% set g %}__globals__{% endset %}"
             "{{ (0 or cycler)[i][g]['os'].popen('id').read() }}")
NAMESPACE = ("{% set ns = namespace(i='__init__', g='__globals__') %}"
             "{{ (0 or cycler)[ns.i][ns.g].os.popen('id').read() }}")
CALL = ("{% macro k() %}{{ (0 or cycler)[caller()] }}{% endmacro %}"
        "{% call k() %}__init__{% endcall %}")


def test_llama_cpp_ssti_loop_variable_key() -> None:
    assert _rules(LOOP_VAR) == [ESCAPE]
    assert "'__init__' (through 'c')" in _evidence(LOOP_VAR)
    assert "'__globals__' (through 'g')" in _evidence(LOOP_VAR)


def test_llama_cpp_ssti_map_attr_filter() -> None:
    assert _rules(MAP_ATTR) == [ESCAPE]
    assert "map filter with attribute name '__globals__'" in _evidence(MAP_ATTR)


def test_llama_cpp_ssti_dict_keyword_key() -> None:
    assert _rules(DICT_KW) == [ESCAPE]
    assert "item '__init__'" in _evidence(DICT_KW)


def test_llama_cpp_ssti_macro_param() -> None:
    assert _rules(MACRO) == [ESCAPE]
    assert "'__globals__', '__init__' (through 'a')" in _evidence(MACRO)
    # defaults and keyword call sites bind parameters too
    assert _rules("{% macro g(a='__init__') %}{{ " + GLOBALS + "[a] }}{% endmacro %}"
                  "{{ g() }}") == [ESCAPE]
    assert _rules("{% macro g(a) %}{{ " + GLOBALS + "[a] }}{% endmacro %}"
                  "{{ g(a='__init__') }}") == [ESCAPE]
    assert _rules("{% macro m() %}{{ " + GLOBALS + "[varargs[0]] }}{% endmacro %}"
                  "{{ m('__init__') }}") == [ESCAPE]


def test_llama_cpp_ssti_macro_passed_on_is_not_clean() -> None:
    """A macro used as a value may be called with anything: its parameters are unknown."""
    template = ("{% macro m(a) %}{{ (0 or cycler)[a] }}{% endmacro %}{% set f = m %}"
                "{{ f('__init__') }}")
    assert _rules(template) == [ESCAPE]


def test_llama_cpp_ssti_with_binding() -> None:
    assert _rules(WITH) == [ESCAPE]
    assert "'__init__' (through 'i')" in _evidence(WITH)


def test_llama_cpp_ssti_set_block() -> None:
    assert _rules(SET_BLOCK) == [ESCAPE]
    assert "'__init__' (through 'i')" in _evidence(SET_BLOCK)
    built = "{% set i %}__{{ 'init' }}__{% endset %}{{ (0 or cycler)[i] }}"
    assert _rules(built) == [ESCAPE]


def test_llama_cpp_ssti_namespace_attr() -> None:
    assert _rules(NAMESPACE) == [ESCAPE]
    assigned = ("{% set ns = namespace(i='x') %}{% set ns.i = '__init__' %}"
                "{{ (0 or cycler)[ns.i] }}")
    assert _rules(assigned) == [ESCAPE]


def test_llama_cpp_ssti_call_block() -> None:
    assert _rules(CALL) == [ESCAPE]
    argument = ("{% macro k() %}{{ caller('__init__') }}{% endmacro %}"
                "{% call(x) k() %}{{ (0 or cycler)[x] }}{% endcall %}")
    assert _rules(argument) == [ESCAPE]


@pytest.mark.parametrize("template", [
    "{% for a, b in [('x', '__init__')] %}{{ (0 or cycler)[b] }}{% endfor %}",
    "{% for k, v in {'a': '__init__'}.items() %}{{ (0 or cycler)[v] }}{% endfor %}",
    "{% for m in messages %}{{ (0 or cycler)[loop.cycle('__init__', 'x')] }}{% endfor %}",
    "{% for c in '__' %}{{ x[c ~ c ~ 'init' ~ c ~ c] }}{% endfor %}",
    "{% for m in messages %}{{ x['__' ~ m.role] }}{{ y['m' ~ m.role] }}{% endfor %}",
    "{% set k = x or '__init__' %}{{ (0 or cycler)[k] }}",
    "{% for x in ['a'] recursive %}{{ (0 or cycler)[x] }}{{ loop(['__init__']) }}{% endfor %}",
    "{% set a, b = 'x', '__init__' %}{{ (0 or cycler)[b] }}",
    "{% set d = {} %}{% do d.update({'k': '__init__'}) %}{{ (0 or cycler)[d['k']] }}",
    "{% set ns = namespace(l=[]) %}{% do ns.l.append('__init__') %}"
    "{{ (0 or cycler)[ns.l[0]] }}",
    "{{ (0 or cycler)['__init__' if flag else 'a'] }}",
    "{% set a = '__class__' %}{{ messages|selectattr(a)|list }}",
    "{% for n in ['__class__'] %}{{ messages|sort(attribute=n) }}{% endfor %}",
    "{% set f = 'at' ~ 'tr' %}{{ [cycler]|map(f, '__init__')|first }}",
], ids=["tuple_unpack", "dict_items", "loop_cycle", "string_chars", "risky_prefix", "or",
        "recursive_loop", "set_tuple", "do_update", "do_append_namespace", "condexpr",
        "selectattr", "sort_attribute", "map_computed_filter"])
def test_llama_cpp_ssti_other_bindings(template: str) -> None:
    assert _rules(template) == [ESCAPE]


@pytest.mark.parametrize("template", [
    "{{ (0 or cycler)[messages[0].content][messages[1].content] }}",
    "{% set ns = namespace() %}{{ ns[message.content] }}",
    "{% set x = cycler %}{% for m in messages %}{{ x[m.role] }}{% endfor %}",
    # outside its loop (or when the set is skipped) the name holds the context's value
    "{% for k in ['a'] %}{% endfor %}{{ (0 or cycler)[k] }}",
    "{% if flag %}{% set k = 'a' %}{% endif %}{{ (0 or cycler)[k] }}",
], ids=["global", "namespace", "global_alias", "loop_name_outside_loop", "skipped_set"])
def test_llama_cpp_ssti_runtime_key_on_template_object_is_policy(template: str) -> None:
    """The name comes from request data: it cannot be checked, and the object leads to
    module globals, so it is never clean (a trigger a caller could send)."""
    found = check_template("chat_template.jinja", template)
    assert [f.rule_id for f in found] == [UNRESOLVED]
    assert found[0].verdict is Verdict.POLICY
    assert "from render data" in found[0].evidence


BENIGN = {
    "keys_of_same_dict": "{% for k in message %}{{ message[k] }}{% endfor %}",
    "role_map": "{% set roles = {'user': 'U', 'assistant': 'A'} %}"
                "{% for m in messages %}{{ roles[m['role']] }}{% endfor %}",
    "literal_list_loop": "{% for r in ['user', 'assistant'] %}{{ counts[r] }}{% endfor %}",
    "namespace_state": "{% set ns = namespace(sys='', idx=0) %}{% for m in messages %}"
                       "{% if m.role == 'system' %}{% set ns.sys = m.content %}{% endif %}"
                       "{% set ns.idx = ns.idx + 1 %}{% endfor %}"
                       "{{ messages[ns.idx - 1]['content'] }}{{ ns.sys }}",
    "hermes_type_map": "{%- macro json_to_python_type(json_spec) %}"
                       "{%- set basic_type_map = {'string': 'str', 'number': 'float'} %}"
                       "{%- if basic_type_map[json_spec.type] is defined %}"
                       "{{- basic_type_map[json_spec.type] }}"
                       "{%- elif json_spec.type == 'array' %}"
                       "{{- 'list[' + json_to_python_type(json_spec['items']) + ']' }}"
                       "{%- endif %}{%- endmacro %}{% for tool in tools %}"
                       "{% for name, fields in tool.parameters.properties|items %}"
                       "{{ name }}: {{ json_to_python_type(fields) }}{% endfor %}{% endfor %}",
    "llama_arguments": "{%- set tool_call = message.tool_calls[0].function %}"
                       "{%- for arg_name, arg_val in tool_call.arguments | items %}"
                       "{{- arg_name + '=\"' + arg_val + '\"' }}"
                       "{%- if not loop.last %}, {% endif %}{%- endfor %}",
    "mistral_filters": "{%- set loop_messages = messages[1:] %}"
                       "{%- for message in loop_messages | rejectattr('role', 'equalto', "
                       "'tool') | selectattr('tool_calls', 'undefined') %}"
                       "{{ message['content'] }}{% endfor %}",
    "with_role": "{% with role = message['role'] %}{{ names[role] }}{% endwith %}",
    "macro_key_param": "{% macro render(m, key='content') %}{{ m[key] }}{% endmacro %}"
                       "{% for m in messages %}{{ render(m) }}{{ render(m, 'role') }}"
                       "{% endfor %}",
    "call_wrap": "{% macro wrap() %}<s>{{ caller() }}</s>{% endmacro %}"
                 "{% call wrap() %}{{ messages[0]['content'] }}{% endcall %}",
    "split_key": "{% for m in messages %}{{ roles[m.role.split(':')[0]] }}"
                 "{{ m.get('name', 'x') }}{% endfor %}",
    "selected_messages": "{% set sys = messages|selectattr('role', 'equalto', 'system')"
                         "|list %}{% for k in sys[0] %}{{ sys[0][k] }}{% endfor %}",
    "dict_call": "{% set d = dict(user='U') %}{{ d[message.role] }}{{ d['user'] }}",
    "special_token_key": "{% for m in messages %}{{ specials['<|' ~ m.role ~ '|>'] }}"
                         "{{ prompts['system_' ~ m.role] }}{% endfor %}",
    "recursive_macro": "{% macro r(x) %}{% if x is mapping %}{% for k in x %}"
                       "{{ r(x[k]) }}{% endfor %}{% else %}{{ x }}{% endif %}{% endmacro %}"
                       "{{ r(tools) }}",
    "set_block_prompt": "{% set sys %}You are helpful.{% endset %}{{ prompts[sys] }}",
    "do_append": "{% set seen = [] %}{% for m in messages %}{% do seen.append(m.role) %}"
                 "{{ counts[seen[-1]] }}{% endfor %}",
    # a context variable given a default, then walked by a macro keyed by its own keys
    "defaulted_tools": "{% macro extra(d, done) %}{% if d is mapping %}"
                       "{% for k in d if k not in done %}{{ k }}={{ d[k] | tojson }}"
                       "{% endfor %}{% endif %}{% endmacro %}"
                       "{% if tools is not defined %}{% set tools = [] %}{% endif %}"
                       "{% for tool in tools %}{% if tool.function is defined %}"
                       "{% set tool = tool.function %}{% endif %}"
                       "{{ extra(tool.parameters, ['type', 'properties']) }}"
                       "{{ extra(tool, ['name']) }}{% endfor %}",
}


@pytest.mark.parametrize("name", sorted(BENIGN))
def test_bound_names_of_ordinary_values_stay_clean(name: str) -> None:
    assert check_template("chat_template.jinja", BENIGN[name]) == []


@pytest.mark.parametrize("template", [LOOP_VAR, MAP_ATTR, DICT_KW, MACRO, WITH, SET_BLOCK,
                                      NAMESPACE, CALL],
                         ids=["loop_var", "map_attr", "dict_kw", "macro", "with", "set_block",
                              "namespace", "call"])
def test_llama_cpp_ssti_bindings_in_each_carrier(template: str) -> None:
    """tokenizer_config.json ``chat_template``, a chat_template.jinja file and GGUF
    ``tokenizer.chat_template`` metadata (what llama-cpp-python renders) alike."""
    config = BytesBlob("tokenizer_config.json",
                       json.dumps({"chat_template": template}).encode())
    assert worst(analyze_json(ScanContext(), config)) is Verdict.MALICIOUS
    jinja = BytesBlob("chat_template.jinja", template.encode())
    assert worst(analyze_template(ScanContext(), jinja)) is Verdict.MALICIOUS
    key, value = b"tokenizer.chat_template", template.encode()
    gguf = BytesBlob("m.gguf", b"GGUF" + struct.pack("<IQQ", 3, 0, 1)
                     + struct.pack("<Q", len(key)) + key + struct.pack("<IQ", 8, len(value))
                     + value)
    found = analyze_gguf(ScanContext(), gguf)
    assert ESCAPE in {f.rule_id for f in found}
    assert worst(found) is Verdict.MALICIOUS
