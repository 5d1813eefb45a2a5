"""bench/ab.py's null variant: B is A. What B/A reads with it is the method's own spread."""


def apply() -> None:
    pass


def revert() -> None:
    pass
