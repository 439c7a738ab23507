"""Sources of Kubernetes objects (state files, the embedded sample) and ClusterState; the API watch
that also feeds it lives in `extender.kube.watch`."""
