"""The memory systems under test, behind one port (systems/port.py)."""
