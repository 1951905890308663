"""Benchmark suite of BENCHMARKS.md: ``python -m pyg_ioaware.bench --help``.

graphs: the synthetic graph suite; cases: what is timed against what;
timing: the measurement; report: tables, JSON, plot and the bar; cli: the
command line.
"""
