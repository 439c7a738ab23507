"""Upstream DRA allocation rules (structured parameters), reproduced exactly."""
