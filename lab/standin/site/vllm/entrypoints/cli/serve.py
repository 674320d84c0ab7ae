"""`vllm serve` as a subcommand object, as in vLLM (vllm/entrypoints/cli/serve.py)."""
from vllm import _standin


class ServeSubcommand(object):
    name = "serve"

    @staticmethod
    def cmd(args):
        return _standin.serve(args)

    def validate(self, args):
        return None
