"""The graph door: a Neo4j server the harness starts itself, and the store the memory system uses.

The only package that imports `neo4j`; the store's Cypher lives in clients/cypher.py, GraphRAG's
agent queries in systems/graphrag/cypher.py.

- `port.py`: the GraphStore port and its records (imports no neo4j: systems code against it);
- `guard.py`: the read-only guard of the agent's free query and the check of Neo4j's plan;
- `conf.py`: the pure parts of a launch: neo4j.conf with its hardening, the java command,
  the JVM's environment, the initial credentials;
- `server.py`: the processes: jars and java, the local JVM, the docker and uri backends,
  and the stop of every server this process started;
- `store.py`: `start_graph` and the Neo4j store: schema, writes, export/import, guarded reads.

How the stages use it
---------------------
ingest (one server per conversation)::

    with start_graph(params, workdir, name=f"conv{cid}") as store:
        store.create_schema()                          # constraints + full-text indexes
        batch, report = validate_batch(raw_nodes, raw_rels, existing=store.labels_of(ids))
        store.write(batch)                             # idempotent UNWIND + MERGE on stable ids
        store.export_jsonl(out / "graph.jsonl")        # deterministic: the DVC out
    # leaving the block stops the server (also on exceptions and Ctrl-C)

answer (a fresh server per conversation)::

    with start_graph(params, workdir, name=f"conv{cid}") as store:
        store.import_jsonl(out / "graph.jsonl")        # creates the schema, then writes
        rows = store.read(agent_query, agent_params)   # guarded, read mode, timeout, row limit
        rows.truncated                                 # True when the row limit cut the result
"""
