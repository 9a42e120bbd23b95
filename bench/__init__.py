"""The benchmark harness: dataset pins, repair, slices, scorer, judge check, record, estimates.
It knows no memory system's internals: systems reach it only as answer traces."""
