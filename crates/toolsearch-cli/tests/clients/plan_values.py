"""What the test clients' plans share: values saved by one step and used by a later one."""


def substitute(value, saved):
    """`value` with every string "$V" replaced by saved[V] (when V was saved), at any depth."""
    if isinstance(value, str) and value.startswith("$") and value[1:] in saved:
        return saved[value[1:]]
    if isinstance(value, dict):
        return {k: substitute(v, saved) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, saved) for v in value]
    return value
