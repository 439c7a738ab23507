"""Everything that talks to the Kubernetes API server, and nothing else does.

- `watch`: list and watch the API server into a ClusterState (cluster mode's object source);
- `binder`: allocator-mode bind: claim writes with resourceVersion preconditions, the Binding,
  and the undo of a failed bind;
- `lease`: coordination.k8s.io Lease leader election, so only one replica binds;
- `api`: what the three share to call the API server: a thread pool per component, one error
  type (`KubeAPIError`) for API and transport failures, raw JSON reading, error descriptions.

The placement core never imports this package: it sees the cluster only through ClusterState,
and `wiring` connects the two.
"""
