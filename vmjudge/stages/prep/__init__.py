"""Stage 1, prep (stage.py): the components checked, the entry unpacked (vmjudge.archive) and
checked to fit its home disk (home_fit.py), setup.sh run in a VM."""
