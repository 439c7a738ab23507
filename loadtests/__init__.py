"""Load-test scenarios: the synthetic cluster and pending-pod generator (`loadtests.generate`)."""
