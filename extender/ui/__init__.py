"""The read-only placement dashboard served at `/ui` (off by default: setting `ui`, flag `--ui`).

Scope: what an operator looks at, not what the scheduler calls. Everything the page needs ships
in this package (`static/`: one HTML page, one script, one stylesheet; no CDN, no font or image
from elsewhere), and every request the page makes goes to this server:

- `GET /ui`: the page;
- `GET /ui/api/status`: index/claims/assumed generations and the newest decision number; the
  page polls it every second and refetches what changed (live updates without a socket);
- `GET /ui/api/fleet`: per node kind and per node, devices, held and free;
- `GET /ui/api/nodes/{name}`: one node's topology drawing data (`fleet.node_detail`);
- `GET /ui/api/decisions` and `/ui/api/decisions/{seq}`: the last decisions, one with its
  per-node reasons and scores (`decisions`);
- `GET /ui/api/pending`: pending pods of the state that use claims (to pick one to explain);
- `POST /ui/api/explain`: a pod (YAML or JSON, or `{"pending": "ns/name"}`) -> what
  `dra-extender explain` prints for it. It evaluates like /filter and /prioritize do, against
  the live index, in small steps between the verbs' work, one explain at a time (429 while one
  runs); it changes nothing.

No route writes to the cluster state, a claim or the assume cache. Every read of the placement
(index, held devices, claims, explain) runs on the placement's worker thread
(`extender.worker`), the one thread allowed to touch it; the event loop only serves the files
and the decision log, which it fills after each verb has answered, from what the verb's own
evaluation already holds (`decisions`).
"""

from __future__ import annotations

from extender.ui.routes import add_dashboard

__all__ = ["add_dashboard"]
