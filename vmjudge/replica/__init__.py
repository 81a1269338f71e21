"""The replica ISO: the judge's own kernel, initramfs, root and agent, the training set, and
`vmjudge-replica check`, which runs stages 1 and 2 with the judge's own stage code."""
