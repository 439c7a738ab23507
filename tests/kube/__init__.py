"""Tests of the kube watch source against the fake API server."""
