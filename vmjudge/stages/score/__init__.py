"""Stage 4, score: on the host only, so reference answers never enter a VM. stage.py runs it;
scoring.py scores archived stage-3 results, for this stage and for `vmjudge rescore`. The
scorers themselves live in vmjudge.scorers."""
