"""The paper's GPT-judge win rate: pairwise verdicts in both orders with ties (`pairwise`) and the length-controlled
win rate (`length_control`)."""
