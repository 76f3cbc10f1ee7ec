"""tally: served by the cloud only. The body is "<log file> <call id>"; appends the id to the log
(one line per run, so a test counts how often each call ran) and answers "cloud <id>"."""


def fn(input, headers):
    log, call = input.split(" ", 1)
    with open(log, "a") as f:
        f.write(call + "\n")
    return "cloud " + call
