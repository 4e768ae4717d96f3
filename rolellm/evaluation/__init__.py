"""Evaluation as the paper does it: ROUGE-L (RAW, CUS, SPE), the GPT-judge win rate, the benchmark runner and its
report."""

from rolellm.evaluation.judge import WinRateResult, build_judge_messages, judge_win_rate, parse_ranking
from rolellm.evaluation.rouge import detect_language, rouge_l, rouge_l_pairs, rouge_l_scores, to_rouge_text
