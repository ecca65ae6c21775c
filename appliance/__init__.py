"""Security-hardened model-loading and serving appliance.

Spine: verify (OpenSSF Model Signing) -> scan (``scanner``) -> preflight (advisory floors,
environment) -> launch vLLM (hardened argv, xgrammar, strict tool calling) -> async gateway.
"""

__version__ = "0.1.0"
