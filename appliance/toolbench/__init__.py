"""``appliance bench tools``: tool-call reliability benchmark against any OpenAI endpoint.

Modules (no import cycles; each imports only those above it):

- ``errors``    ``BenchError`` with stable codes (``endpoint_unreachable``, ``bad_api_key``, …)
- ``suites``    built-in suite data (``smoke``, ``standard``): cases with known answers
- ``ast_match`` BFCL's AST match: is a call *right* (name, arguments, typed values)
- ``expected``  expected-call accuracy suites (``accuracy``, ``accuracy-mini``; package data)
- ``suite``     ``Case`` and ``load_suite(NAME|FILE)`` with field-level validation
- ``checks``    ``judge(case, body, step)``: is one chat completion a valid, correct answer
- ``stats``     Wilson interval, percentiles, chained success (measured and predicted)
- ``client``    the async ``openai`` client: preflight and one request → ``Attempt``
- ``runner``    concurrency levels, agent-loop chains, plain (unconstrained) twin, progress
- ``compare``   ``--compare``: two targets, requests interleaved and paired case by case
- ``categories`` accuracy per category; the paired comparison (flips, McNemar)
- ``report``    JSON report, Markdown, ``--baseline`` comparison
- ``plots``     PNG plots (matplotlib, imported lazily)
- ``raw_vllm``  the same model on a raw vLLM engine without the appliance's guarantees
- ``cli``       ``register(subparsers)``: the ``appliance bench`` command group

May import: the spine (:mod:`appliance.serve`), :mod:`appliance.builtin`,
:mod:`appliance.engine`, :mod:`appliance.config`, :mod:`appliance.errors`; only the CLI imports
it.
"""
