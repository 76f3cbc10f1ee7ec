"""Python handlers of the serverless-offline peer."""


def echo(event, context):
    """Echoes the event back with a marker, so tests can tell the real handler ran."""
    return {"handler": "python", "event": event}


def boom(event, context):
    """Raises: Lambda reports an Unhandled function error."""
    raise ValueError("boom from python")
