"""counter: how many times this warm worker has run, so a test can tell a replay from a re-run."""

CALLS = 0


def fn(input, headers):
    global CALLS
    CALLS += 1
    return f"call {CALLS}: {input or ''}"
