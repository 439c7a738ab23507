"""The DRA CEL environment on cel-python."""
