"""Analysis shared by the launchers and benchmarks: the seeds' theory (seed 000 Claims 1-2), run metrics with
bootstrap confidence intervals, Markdown tables and plots."""
