"""An in-process fake Kubernetes API server for integration tests (see `server.py`)."""
