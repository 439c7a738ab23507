"""The evaluation core behind /filter, /prioritize and /bind.

Parts, each testable alone:
- `view`: the ClusterView, the device index, held devices and free masks at one generation;
- `evaluation`: PodEvaluation and NodeVerdict, the evaluation LRU and the pods seen;
- `held`, `assumed`: the devices held by allocated claims and by allocations bind chose whose
  writes are not visible yet (the view's inputs);
- `tiers`: the deciding tiers (vectorised check, topology kernel, first-fit kernel, upstream's
  search) behind one `Tier` interface, run in that order; their engines are `feasibility`
  (Hall's condition), `firstfit` (the first-fit kernel's inputs) and `searching` (upstream's search);
- `reasons`: the words of every verdict reason;
- `ranking`: topology scores of the nodes that passed (the kernels' choice or first-fit's), with
  `scoring` (kernel inputs, score terms, 0..10 priorities) and `gang` (the clique term);
- `binding`: the one bind choice both binders use;
- `placement`: the thin facade the server and the binders call.
"""
