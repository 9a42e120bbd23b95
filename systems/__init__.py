"""The memory systems under test, behind one port (systems/port.py): graphrag (systems/graphrag/),
full_context, rag and no_memory; systems/registry.py picks one by params `system`."""
