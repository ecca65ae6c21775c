"""JSON Schemas from clients, checked before they reach the engine's grammar compiler.

Modules::

    walk            the one schema walker: which keywords hold subschemas, iterative walk
    subset          check_schema / SchemaCache: the keyword subset xgrammar enforces
                    (invalid_schema, unsupported_schema_feature), compiled validators
    grammar_limits  check_pattern / check_schema_complexity: patterns and sizes that could
                    stall the grammar compile (schema_too_complex, GHSA-rwxx-mrjm-wc2m)

May import: :mod:`appliance.gateway.errors`, :mod:`appliance.gateway.fastjson`, ``scanner``;
nothing else of the gateway.
"""

from .grammar_limits import (
    DEFAULT_LIMITS,
    ERROR_CODE,
    GrammarLimits,
    check_pattern,
    check_schema_complexity,
)
from .subset import SchemaCache, SchemaProblem, check_schema

__all__ = [
    "DEFAULT_LIMITS", "ERROR_CODE", "GrammarLimits", "SchemaCache", "SchemaProblem",
    "check_pattern", "check_schema", "check_schema_complexity",
]
