"""geocloud: on the cloud only, so an edge offloads it; answers like `geo` with the X-Geo-*
request headers it received, one `name: value` line each in name order."""


def fn(input, headers):
    return "".join(f"{k}: {v}\n" for k, v in sorted(headers.items()) if k.startswith("x-geo-"))
