"""`evaluate` modules: each folder loads with `evaluate.load(<folder>)`, imports as a class, and pushes as a Space."""

from pathlib import Path


METRICS_DIR = Path(__file__).resolve().parent
