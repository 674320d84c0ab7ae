"""The `vllm` console script's entry point, as in vLLM (vllm/entrypoints/cli/main.py): parse, validate, dispatch."""
import sys

from vllm import _standin
from vllm.entrypoints.cli.serve import ServeSubcommand


def main():
    args = _standin.parse(sys.argv[1:])
    command = ServeSubcommand()
    command.validate(args)
    return ServeSubcommand.cmd(args)
