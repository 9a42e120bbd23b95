"""The commands a person runs beside the pipeline (`python -m commands.<name>`: preflight,
estimate, compare, merge, viewer, budget, neo4j_archive). None is a DVC stage: stages/ holds those
only, and the two share the entry-point shell in stages/common.py."""
