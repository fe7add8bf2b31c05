"""The CUDA device (cuda-python). Not built yet: `available()` tells whether a GPU can be used here."""


def available() -> bool:
    try:
        from cuda.bindings import driver  # noqa: F401
    except Exception:
        return False
    try:
        err, = driver.cuInit(0)[:1]
        return int(err) == 0
    except Exception:
        return False
