"""flaky in the cloud: works, and says where it ran and what it received."""


def fn(input, headers):
    return "cloud flaky ok: " + (input or "")
