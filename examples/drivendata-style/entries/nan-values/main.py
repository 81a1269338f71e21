"""Leaves a value out: pandas writes NaN as an empty cell (and the column, now of floats, as 1.0)."""
import pandas as pd

fmt = pd.read_csv("data/submission_format.csv", index_col=0) + 1
fmt["HistoryMentalIllnessTreatmnt"] = fmt["HistoryMentalIllnessTreatmnt"].astype(float)
fmt.loc[fmt.index[1], "HistoryMentalIllnessTreatmnt"] = float("nan")
fmt.to_csv("submission.csv")
