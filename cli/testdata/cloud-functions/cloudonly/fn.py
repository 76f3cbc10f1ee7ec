"""cloudonly: deployed on the cloud node only."""


def fn(input, headers):
    return "only in the cloud"
