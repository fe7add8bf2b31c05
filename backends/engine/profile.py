"""An optimization profile: min/opt/max shapes per dynamic input. The builder times at opt and the runtime checks
every shape it is given against [min, max], so it lives beside both (runtime does not import the builder)."""
from __future__ import annotations

from native.errors import ShapeError


class OptimizationProfile:
    """min/opt/max shapes per dynamic input (TensorRT's IOptimizationProfile)."""

    def __init__(self):
        self.shapes: dict[str, tuple] = {}
        self.shape_values: dict[str, tuple] = {}

    def set_shape(self, name, min, opt, max):
        min, opt, max = tuple(map(int, min)), tuple(map(int, opt)), tuple(map(int, max))
        if not (len(min) == len(opt) == len(max)):
            raise ShapeError(f"profile for input '{name}': min/opt/max ranks differ ({min}, {opt}, {max})")
        if any(not (a <= b <= c) for a, b, c in zip(min, opt, max)):
            raise ShapeError(f"profile for input '{name}': need min <= opt <= max per dim, got {min}, {opt}, {max}")
        self.shapes[name] = (min, opt, max)

    def get_shape(self, name):
        return self.shapes.get(name)

    def set_shape_values(self, name, min, opt, max):
        self.shape_values[name] = (tuple(min), tuple(opt), tuple(max))

    def check(self, name, shape):
        """Raise ShapeError naming input, shape and profile if shape lies outside [min, max]."""
        if name not in self.shapes:
            return
        lo, _, hi = self.shapes[name]
        shape = tuple(shape)
        if len(shape) != len(lo) or any(not (a <= s <= b) for a, s, b in zip(lo, shape, hi)):
            raise ShapeError(f"input '{name}' has shape {list(shape)}, outside the optimization profile "
                             f"min={list(lo)} max={list(hi)}; rebuild with a profile that covers it")

    def to_json(self):
        return {k: [list(x) for x in v] for k, v in self.shapes.items()}

    @classmethod
    def from_json(cls, d):
        p = cls()
        for k, (a, b, c) in d.items():
            p.set_shape(k, a, b, c)
        return p
