"""What the torchvision sweep scripts (torchvision_all.py, torchvision_fused.py) share to print a
result line: run as `python scripts/<sweep>.py`, they find this module beside them."""


def fmt(v, spec="{}"):
    """v formatted by spec, or "-" for a value the run did not measure (None)."""
    return "-" if v is None else spec.format(v)
