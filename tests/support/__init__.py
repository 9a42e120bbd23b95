"""Helpers shared by tests: stand-ins for outside files and loopback servers."""
