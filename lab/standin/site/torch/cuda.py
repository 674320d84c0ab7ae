"""torch.cuda without a GPU: nothing available, and so no arch list (as real torch says without a GPU)."""
from torch import _C


def is_available():
    return False


def device_count():
    return 0


def get_arch_list():
    if not is_available():
        return []
    return _C._cuda_getArchFlags().split()
