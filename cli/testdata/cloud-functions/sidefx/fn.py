"""sidefx: appends a line to the file named by the body, then raises if it wrote the first line
(a function that fails after a side effect; the second run, wherever it is, answers)."""


def fn(input, headers):
    with open(input, "a") as f:
        f.write("ran\n")
    with open(input) as f:
        lines = sum(1 for _ in f)
    if lines == 1:
        raise RuntimeError("failed after writing line 1")
    return "ok after %d lines" % lines
