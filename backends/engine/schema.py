"""JSON schema combinators: each checks a value and appends (path, message) for every defect it finds.

The plan header (plan_schema.py) and the declared layer params (params.py) are tables of these."""
from __future__ import annotations


class Schema:
    def check(self, value, path, errors):  # pragma: no cover - interface
        raise NotImplementedError

    def describe(self):
        return type(self).__name__.lower()


def _type_name(v):
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "null"}.get(type(v), type(v).__name__)


class Any(Schema):
    def check(self, value, path, errors):
        pass


class Str(Schema):
    def __init__(self, nonempty=False, choices=None):
        self.nonempty, self.choices = nonempty, choices

    def check(self, value, path, errors):
        if not isinstance(value, str):
            errors.append((path, f"must be a string, got {_type_name(value)}"))
        elif self.nonempty and not value:
            errors.append((path, "must not be empty"))
        elif self.choices is not None and value not in self.choices:
            errors.append((path, f"'{value[:60]}' is not one of {sorted(self.choices)}"))

    def describe(self):
        return "a string"


class Int(Schema):
    def __init__(self, lo=None, hi=None):
        self.lo, self.hi = lo, hi

    def check(self, value, path, errors):
        if isinstance(value, bool) or not isinstance(value, int):
            errors.append((path, f"must be an integer, got {_type_name(value)}"))
        elif self.lo is not None and value < self.lo:
            errors.append((path, f"must be >= {self.lo}, got {value}"))
        elif self.hi is not None and value > self.hi:
            errors.append((path, f"must be <= {self.hi}, got {value}"))

    def describe(self):
        return "an integer"


class Num(Schema):
    def check(self, value, path, errors):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            errors.append((path, f"must be a number, got {_type_name(value)}"))

    def describe(self):
        return "a number"


class Bool(Schema):
    def check(self, value, path, errors):
        if not isinstance(value, bool):
            errors.append((path, f"must be true or false, got {_type_name(value)}"))


class Null(Schema):
    def check(self, value, path, errors):
        if value is not None:
            errors.append((path, f"must be null, got {_type_name(value)}"))


class Opt(Schema):
    """The value may be null."""

    def __init__(self, inner):
        self.inner = inner

    def check(self, value, path, errors):
        if value is not None:
            self.inner.check(value, path, errors)


class OneOf(Schema):
    """The first alternative the value passes; else the errors of the alternative picked by `pick(value)`."""

    def __init__(self, *alternatives, pick=None):
        self.alternatives, self.pick = alternatives, pick

    def check(self, value, path, errors):
        attempts = []
        for alt in self.alternatives:
            errs = []
            alt.check(value, path, errs)
            if not errs:
                return
            attempts.append(errs)
        idx = self.pick(value) if self.pick else 0
        errors.extend(attempts[min(idx, len(attempts) - 1)])


class List(Schema):
    def __init__(self, item, min_len=0, max_len=None):
        self.item, self.min_len, self.max_len = item, min_len, max_len

    def check(self, value, path, errors):
        if not isinstance(value, list):
            errors.append((path, f"must be a list, got {_type_name(value)}"))
            return
        if len(value) < self.min_len or (self.max_len is not None and len(value) > self.max_len):
            want = f"{self.min_len}" if self.max_len == self.min_len else \
                f"{self.min_len}..{self.max_len if self.max_len is not None else ''}"
            errors.append((path, f"must have {want} items, has {len(value)}"))
            return
        for i, v in enumerate(value):
            self.item.check(v, f"{path}[{i}]", errors)


class Map(Schema):
    """An object with arbitrary string keys, every value checked by `value`."""

    def __init__(self, value):
        self.value = value

    def check(self, value, path, errors):
        if not isinstance(value, dict):
            errors.append((path, f"must be an object, got {_type_name(value)}"))
            return
        for k, v in value.items():
            self.value.check(v, f"{path}.{k}", errors)


class Obj(Schema):
    """An object with these fields ('?name' optional); unknown keys are errors unless extra=True."""

    def __init__(self, fields: dict, extra=False):
        self.fields = {k.lstrip("?"): (v, not k.startswith("?")) for k, v in fields.items()}
        self.extra = extra

    def check(self, value, path, errors):
        if not isinstance(value, dict):
            errors.append((path, f"must be an object, got {_type_name(value)}"))
            return
        for name, (schema, required) in self.fields.items():
            if name in value:
                schema.check(value[name], f"{path}.{name}" if path else name, errors)
            elif required:
                errors.append((f"{path}.{name}" if path else name, "is required but missing"))
        if not self.extra:
            unknown = [k for k in value if k not in self.fields]
            if unknown:
                errors.append((f"{path}.{unknown[0]}" if path else unknown[0],
                               f"is not a known field here (known: {', '.join(self.fields)})"))

    def add(self, key: str, schema: Schema):
        """Add one field to this table; '?key' makes it optional."""
        self.fields[key.lstrip("?")] = (schema, not key.startswith("?"))
        return self


class Lazy(Schema):
    """A forward reference (graphs nest in nodes)."""

    def __init__(self, get):
        self.get = get

    def check(self, value, path, errors):
        self.get().check(value, path, errors)
