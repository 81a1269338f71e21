module vmjudge/tests/tarlist

go 1.19
