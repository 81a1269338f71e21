"""A good submission: each variable whose phrase a narrative holds is predicted 1 (the categorical
ones take the value the phrase gives), written the way DrivenData's benchmark writes its predictions."""

import re
from pathlib import Path

import pandas as pd

SUBMISSION_PATH = Path("submission.csv")
FEATURES_PATH = Path("data/test_features.csv")
SUBMISSION_FORMAT_PATH = Path("data/submission_format.csv")


def main():
    features = pd.read_csv(FEATURES_PATH, index_col=0)
    submission_format = pd.read_csv(SUBMISSION_FORMAT_PATH, index_col=0)
    predictions = pd.DataFrame(0, index=submission_format.index, columns=submission_format.columns)
    for uid, row in features.loc[submission_format.index].iterrows():
        text = f"{row['NarrativeLE']} {row['NarrativeCME']}"
        for column in predictions.columns:
            found = re.search(rf"\[{column}(?:=(\d+))?\]", text)
            if found:
                predictions.loc[uid, column] = int(found.group(1) or 1)
    for column in ("InjuryLocationType", "WeaponType1"):
        predictions[column] = predictions[column].where(predictions[column] > 0, 1)
    print(f"Saving predictions of shape {predictions.shape} to {SUBMISSION_PATH}")
    predictions.to_csv(SUBMISSION_PATH, index=True)


if __name__ == "__main__":
    main()
