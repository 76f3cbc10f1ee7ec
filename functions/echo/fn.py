"""echo: returns its input unchanged (an empty body gives an empty output)."""


def fn(input, headers):
    return input
