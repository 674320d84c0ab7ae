"""torch._C's `_cuda_getArchFlags`: the architectures the build carries kernels for, read without a GPU."""
import os

# What torch 2.11.0 + CUDA 13.0 printed on a real H200 machine (issue 18); STANDIN_TORCH_ARCH_FLAGS
# (the :oldarch image) stands for a build without the lab hosts' architectures.
DEFAULT_ARCH_FLAGS = "sm_75 sm_80 sm_86 sm_90 sm_100 sm_120"


def _cuda_getArchFlags():
    return os.environ.get("STANDIN_TORCH_ARCH_FLAGS", DEFAULT_ARCH_FLAGS)
