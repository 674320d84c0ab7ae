"""The lab's vLLM stand-in as a package (lab/standin/site/README.md): only what inkling.fleet asks of vLLM."""
from vllm._standin import VERSION as __version__  # noqa: F401
