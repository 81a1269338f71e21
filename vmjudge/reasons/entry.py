"""Reasons an entry fails by its own fault while it is judged."""

from __future__ import annotations

from .reason import Reason

REASONS: tuple[Reason, ...] = (
    Reason(
        code="answers-too-large", fault="entry", where="upload or prep",
        means="The results the entry submits for the training set are larger than the judge keeps (answers.txt, or a "
              "container image's result files); found at upload or in prep.",
        remedy="Keep only the results your program really writes (in answers.txt, one line per training record) and "
               "submit again.",
    ),
    Reason(
        code="bad-archive", fault="entry", where="upload or prep",
        means="The archive cannot be used: badly named, too large, damaged, holding links, unsafe or repeated names, "
              "too many files, or a name the runtime needs; found at upload or in prep.",
        remedy="Make the archive again as the message says (for example with `zip -r` or `tar czf`) and submit again.",
    ),
    Reason(
        code="bad-image", fault="entry", where="upload or prep",
        means="The saved container image cannot be used: malformed, too large unpacked, naming no command, with "
              "layers that cannot be applied or result paths that are not regular files; found at upload or in prep.",
        remedy="Build the image with `docker build` or `podman build`, save it with `docker save` or `podman save` "
               "and submit again.",
    ),
    Reason(
        code="bad-script", fault="entry", where="upload or prep",
        means="A script (setup.sh, next.sh or main.sh) has Windows (CRLF) line endings, which the shell cannot run; "
              "found at upload or in prep.",
        remedy="Convert the script with `dos2unix` and submit again.",
    ),
    Reason(
        code="entry-too-large", fault="entry", where="upload or prep",
        means="The unpacked entry needs more space, or more files and folders, than its home disk holds; found at "
              "upload or in prep.",
        remedy="Make the entry smaller, or pack many small files into one, and submit again.",
    ),
    Reason(
        code="missing-component", fault="entry", where="upload or prep",
        means="The archive lacks, at its top, a file the challenge requires (such as setup.sh and next.sh, or main.py "
              "for a submission); found at upload or in prep.",
        remedy="Put the required files at the top of the archive (zip the files, not their folder) and submit again.",
    ),
    Reason(
        code="entry-fault", fault="entry", where="prep",
        means="The judge's agent in the VM found the entry at fault while installing it, without naming a known "
              "reason.",
        remedy="Read the message in the report, check the entry with the replica, fix it and submit again.",
    ),
    Reason(
        code="setup-error", fault="entry", where="prep",
        means="The entry's setup.sh failed (it ended with a non-zero exit status), or a submission could not be "
              "installed in the runtime.",
        remedy="Read the output in the report, fix the entry, check it with the replica and submit again.",
    ),
    Reason(
        code="setup-timeout", fault="entry", where="prep",
        means="The entry's setup.sh did not finish within the challenge's setup time ([limits] setup).",
        remedy="Make setup.sh faster (for example, bring prepared files rather than making them) and submit again.",
    ),
    Reason(
        code="quiz-error", fault="entry", where="quiz",
        means="On a training record or the sample, the entry's command failed: it exited with an error or was killed, "
              "for example for running out of memory.",
        remedy="Read that record's output in the report, fix the program and submit again.",
    ),
    Reason(
        code="quiz-format", fault="entry", where="quiz",
        means="The submission.csv the program wrote on the sample does not match the challenge's submission format.",
        remedy="Make the program write the format's ids and columns, in its order, as the report shows, and submit "
               "again.",
    ),
    Reason(
        code="quiz-invalid-answer", fault="entry", where="quiz",
        means="The submitted answers.txt holds an answer the challenge's official scorer refuses; found before any VM "
              "runs.",
        remedy="Make next.sh write only the allowed answers, put those in the submitted answers.txt, and submit "
               "again.",
    ),
    Reason(
        code="quiz-mismatch", fault="entry", where="quiz",
        means="On a training record, the entry's output differs from the results it submitted, or answers.txt lost a "
              "line it held before.",
        remedy="Make the program give the same output on every run, submit what it really writes, and check with the "
               "replica.",
    ),
    Reason(
        code="quiz-output", fault="entry", where="quiz",
        means="On the training set, the program left no submission.csv (or one too large), or an output the challenge "
              "asks for was missing or invalid.",
        remedy="Make the program write every output the challenge asks for, as the report shows, and submit again.",
    ),
    Reason(
        code="quiz-timeout", fault="entry", where="quiz",
        means="The program did not finish a training record within its time, or the quiz did not finish within its "
              "total time ([limits] per_record, quiz_total).",
        remedy="Make the program faster, check its time with the replica, and submit again.",
    ),
    Reason(
        code="exam-error", fault="entry", where="exam",
        means="On the test set, the submission's command failed, so the exam has no results to score.",
        remedy="The exam is silent, so you get no detail beyond this reason: reproduce it with the replica on the "
               "training data, fix it and submit again.",
    ),
    Reason(
        code="exam-format", fault="entry", where="exam",
        means="On the test set, the submission.csv the program wrote does not match the submission format.",
        remedy="The exam is silent, so you get no detail beyond this reason: reproduce it with the replica on the "
               "training data, fix it and submit again.",
    ),
    Reason(
        code="exam-output", fault="entry", where="exam",
        means="On the test set, the program left no submission.csv, or one (or all together) larger than the judge "
              "keeps.",
        remedy="The exam is silent, so you get no detail beyond this reason: reproduce it with the replica on the "
               "training data, fix it and submit again.",
    ),
    Reason(
        code="exam-timeout", fault="entry", where="exam",
        means="The exam did not finish every test record within its total time ([limits] exam_total).",
        remedy="The exam is silent, so you get only the share of records done: time the program with the replica on "
               "the training data, make it faster and submit again.",
    ),
    Reason(
        code="invalid-answer", fault="entry", where="score",
        means="The entry's answers on the test set include one that the challenge's official scorer refuses.",
        remedy="The report names no test record: make the program write only allowed answers, check it with the "
               "replica on the training data, and submit again.",
    ),
)
