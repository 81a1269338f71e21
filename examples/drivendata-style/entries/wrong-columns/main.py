"""Leaves out the last column the format asks for."""
import pandas as pd

fmt = pd.read_csv("data/submission_format.csv", index_col=0)
fmt.drop(columns=["WeaponType1"]).assign(**{c: 1 for c in fmt.columns[:-1]}).to_csv("submission.csv")
