"""The lab's PyTorch stand-in (lab/standin/site/README.md): versions and compiled architectures, no GPU."""
from torch import _C, cuda, version  # noqa: F401
from torch.version import __version__  # noqa: F401
