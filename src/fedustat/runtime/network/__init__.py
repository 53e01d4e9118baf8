"""Networked runs: each role in its own process over mutually authenticated gRPC."""
