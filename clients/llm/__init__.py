"""The door to language models (see clients/llm/client.py)."""
