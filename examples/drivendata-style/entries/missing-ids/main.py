"""Predicts every row but the last two."""
import pandas as pd

fmt = pd.read_csv("data/submission_format.csv", index_col=0)
(fmt.iloc[:-2] + 1).to_csv("submission.csv")
