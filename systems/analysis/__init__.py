"""Analysis shared by the launchers and benchmarks (issue 6): the seeds' theory (seed 000 Claims 1-2), run metrics with
bootstrap confidence intervals, Markdown tables and plots."""
