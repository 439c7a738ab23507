"""Numba topology kernels; depend only on numpy and numba."""
