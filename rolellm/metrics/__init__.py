"""`evaluate` modules: each folder loads with `evaluate.load(<folder>)`, imports as a class from its script
(`from rolellm.metrics.rolebench_rouge.rolebench_rouge import RolebenchRouge`), and pushes as a Space
(`rolellm push-metric`)."""
