"""dra-topology-extender: a kube-scheduler extender for DRA ResourceClaims with topology-aware placement."""

__version__ = "0.1.0"
