"""slow at the edge: never answers within the edge backend's timeout."""
import time


def fn(input, headers):
    time.sleep(60)
    return "too late"
