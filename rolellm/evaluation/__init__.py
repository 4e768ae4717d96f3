"""Evaluation as the paper does it: ROUGE-L (RAW, CUS, SPE), the GPT-judge win rate, the benchmark runner and its
report."""
