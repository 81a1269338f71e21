"""Leaves out the last column the format asks for."""
import pandas as pd

fmt = pd.read_csv("data/submission_format.csv", index_col=0)
fmt.drop(columns=["WeaponType1"]).assign(**dict.fromkeys(fmt.columns[:-1], 1)).to_csv("submission.csv")
