"""Sources of Kubernetes objects (state files, the embedded sample, the API watch) and ClusterState."""
