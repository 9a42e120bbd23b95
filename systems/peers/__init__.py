"""Peers' released memory systems behind the port, each in its own adapter: the only module that
imports the peer's package (import-linter's `peer-packages` contract)."""
