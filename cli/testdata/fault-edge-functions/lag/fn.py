"""lag: the body is "<seconds> <tag>"; sleeps that long, then answers the tag (so a test can
tell one call's answer from another's on the same instance)."""
import time


def fn(input, headers):
    secs, tag = input.split(" ", 1)
    time.sleep(float(secs))
    return tag
