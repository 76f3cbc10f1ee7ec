"""pyticks: a generator streams five server-sent events 300 ms apart."""
import time


def fn(input, headers):
    for n in range(5):
        if n:
            time.sleep(0.3)
        yield f'data: {{"n":{n},"node":"{headers.get("X-Geo-Node")}"}}\n\n'
