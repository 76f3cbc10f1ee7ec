"""geo: answers with the X-Geo-* request headers it received, one `name: value` line each in
name order, so a test sees exactly what the platform told the function."""


def fn(input, headers):
    return "".join(f"{k}: {v}\n" for k, v in sorted(headers.items()) if k.startswith("x-geo-"))
