"""Benchmark suite of docs/benchmark_protocol.md: ``python -m pyg_ioaware.bench --help``.

graphs: the synthetic graph suite; cases: what is timed against what (one
module per kernel family); minibatch: the mini-batch cases (sampled
batches, a 2-layer model's training step); timing and bandwidth: the
measurement; report: ratios, the bar, tables and JSON; plot: the figure;
progress: progress lines; cli: the command line.
"""
