"""The CPU speed path: int8 quantization, our C++ kernels, bf16 weight copies, huge pages and ``auto`` precision.

Why a package of its own: the model (:mod:`turbotts.model`) is written once, as plain
PyTorch, and knows nothing of CPUs. What makes it fast on one is swapped in from
here by the loader's caller and the engine's runner, as quantization swaps modules.
"""
