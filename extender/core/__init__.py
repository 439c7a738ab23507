"""The evaluation core behind /filter, /prioritize and /bind.

Parts, each testable alone:
- `view`: the ClusterView, the device index, held devices and free masks at one generation;
- `evaluation`: PodEvaluation and NodeVerdict, the evaluation LRU and the pods seen;
- `tiers`: the deciding tiers (vectorised check, topology kernel, first-fit kernel, upstream's
  search) behind one `Tier` interface, run in that order;
- `reasons`: the words of every verdict reason;
- `ranking`: topology scores of the nodes that passed (the kernels' choice or first-fit's);
- `binding`: the one bind choice both binders use;
- `placement`: the thin facade the server and the binders call.
"""
