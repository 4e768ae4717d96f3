"""Multi-turn evaluation: a simulated user talks with the role model (`dialogue`), rubric judges score the
conversations (`rubric`), their agreement with each other and with people (`agreement`), and the report (`report`)."""
