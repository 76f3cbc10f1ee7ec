"""doze (nap with another profile): sleeps for the seconds in the body (default 0) and answers with its process id, so a test
can keep an instance busy and tell which instance served a call."""
import os
import time


def fn(input, headers):
    time.sleep(float(input or 0))
    return f"pid {os.getpid()}"
