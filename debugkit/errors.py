"""The exception family (defined in the bottom room so every room can raise it)."""
from native.errors import *  # noqa: F401,F403
from native.errors import DebugkitError  # noqa: F401
