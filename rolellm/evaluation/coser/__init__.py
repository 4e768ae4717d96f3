"""CoSER's given-circumstance acting evaluation: test set, simulation, flaw-deduction judge and score, report."""
