"""Built-in plugins for the cheap ai.onnx.ml ops: LabelEncoder, ArrayFeatureExtractor, Binarizer, TreeEnsemble."""
import numpy as np

from native.errors import ExecutionError
from native.plugins import Plugin, register_plugin


def _first(fields, names):
    for n in names:
        v = fields.get(n)
        if v is not None and np.size(v) > 0:
            return n, v
    return None, None


@register_plugin
class LabelEncoderPlugin(Plugin):
    """Maps each element through keys -> values (last repeated key wins; NaN keys match NaN); misses get the
    default of the values' type."""

    name = "LabelEncoder"

    def enqueue(self, inputs, fields):
        x = np.asarray(inputs[0])
        _, keys = _first(fields, ["keys_tensor", "keys_strings", "keys_int64s", "keys_floats"])
        vname, values = _first(fields, ["values_tensor", "values_strings", "values_int64s", "values_floats"])
        keys, values = np.asarray(keys), np.asarray(values)
        if vname == "values_strings" or values.dtype.kind in "OUS":
            dtype, default = object, fields.get("default_string", "_Unused")
        elif vname == "values_int64s":
            dtype, default = np.int64, fields.get("default_int64", -1)
        elif vname == "values_floats":
            dtype, default = np.float32, fields.get("default_float", -0.0)
        else:
            dtype, default = values.dtype, None
        if fields.get("default_tensor") is not None:
            default = np.asarray(fields["default_tensor"]).reshape(-1)[0]
        if default is None:
            default = {"f": -0.0, "O": "_Unused"}.get(np.dtype(dtype).kind, -1)
        values = values.astype(dtype)
        flat = x.reshape(-1)
        if keys.dtype.kind in "OUS" or flat.dtype == object:
            table = {str(k): i for i, k in enumerate(keys.reshape(-1).tolist())}
            pos = np.array([table.get(str(s), -1) for s in flat.tolist()], np.int64)
        else:
            keys = keys.astype(np.float64 if keys.dtype.kind == "f" else keys.dtype).reshape(-1)
            f = flat.astype(keys.dtype)
            eq = (f[:, None] == keys[None, :])
            if keys.dtype.kind == "f":
                eq |= np.isnan(f)[:, None] & np.isnan(keys)[None, :]
            last = keys.size - 1 - np.argmax(eq[:, ::-1], axis=1)
            pos = np.where(eq.any(axis=1), last, -1)
        out = np.where(pos >= 0, values[np.maximum(pos, 0)] if values.size else default, default)
        return [out.astype(dtype).reshape(x.shape)]


@register_plugin
class ArrayFeatureExtractorPlugin(Plugin):
    """Selects the given indices along the last axis."""

    name = "ArrayFeatureExtractor"

    def enqueue(self, inputs, fields):
        x, idx = np.asarray(inputs[0]), np.asarray(inputs[1], np.int64).reshape(-1)
        out = np.take(x, idx, axis=-1)
        return [out.reshape(1, -1) if x.ndim == 1 else out]


@register_plugin
class BinarizerPlugin(Plugin):
    """1 where x > threshold, else 0, in x's dtype."""

    name = "Binarizer"

    def enqueue(self, inputs, fields):
        x = inputs[0]
        return [(x > float(fields.get("threshold", 0.0))).astype(x.dtype)]


@register_plugin
class TreeEnsemblePlugin(Plugin):
    """ai.onnx.ml TreeEnsemble (opset 5): all rows walk each tree together, one level per step; leaf weights
    are aggregated per target (SUM / AVERAGE / MIN / MAX), then post-transformed."""

    name = "TreeEnsemble"

    def enqueue(self, inputs, fields):
        x = np.asarray(inputs[0])
        xf = x.astype(np.float64).reshape(x.shape[0], -1)
        n_rows = xf.shape[0]
        g = lambda k, d=None: np.asarray(fields.get(k, d) if fields.get(k) is not None else d)  # noqa: E731
        feat, splits = g("nodes_featureids").astype(np.int64), g("nodes_splits").astype(np.float64)
        modes = g("nodes_modes").astype(np.int64)
        t_id, t_leaf = g("nodes_truenodeids").astype(np.int64), g("nodes_trueleafs").astype(bool)
        f_id, f_leaf = g("nodes_falsenodeids").astype(np.int64), g("nodes_falseleafs").astype(bool)
        nan_true = g("nodes_missing_value_tracks_true", np.zeros(len(feat))).astype(bool)
        if nan_true.size == 0:
            nan_true = np.zeros(len(feat), bool)
        leaf_t, leaf_w = g("leaf_targetids").astype(np.int64), g("leaf_weights").astype(np.float64)
        members = self._member_sets(modes, g("membership_values", np.zeros(0)).astype(np.float64))
        n_targets, agg = int(fields.get("n_targets", 1)), int(fields.get("aggregate_function", 1))
        roots = g("tree_roots").astype(np.int64).reshape(-1)
        init = {1: 0.0, 0: 0.0, 2: np.inf, 3: -np.inf}[agg]
        out = np.full((n_rows, n_targets), init)
        rows = np.arange(n_rows)
        for root in roots:
            node = np.full(n_rows, root)
            leaf = np.zeros(n_rows, bool)
            while not leaf.all():
                act = ~leaf
                nd = node[act]
                v = xf[rows[act], feat[nd]]
                s = splits[nd]
                m = modes[nd]
                go = np.select([m == 0, m == 1, m == 2, m == 3, m == 4, m == 5],
                               [v <= s, v < s, v >= s, v > s, v == s, v != s], default=False)
                for node_index, values in members.items():
                    sel = nd == node_index
                    go[sel] = np.isin(v[sel], values)
                go = np.where(np.isnan(v), nan_true[nd], go)
                node[act] = np.where(go, t_id[nd], f_id[nd])
                leaf[act] = np.where(go, t_leaf[nd], f_leaf[nd])
            tgt, w = leaf_t[node], leaf_w[node]
            if agg in (0, 1):
                np.add.at(out, (rows, tgt), w)
            elif agg == 2:
                np.minimum.at(out, (rows, tgt), w)
            else:
                np.maximum.at(out, (rows, tgt), w)
        if agg == 0:
            out /= max(len(roots), 1)
        out = self._post(out, int(fields.get("post_transform", 0)))
        return [out.astype(x.dtype)]

    @staticmethod
    def _member_sets(modes, values):
        """node index -> its member values (the NaN-delimited groups, in order of the MEMBER nodes)."""
        groups, cur = [], []
        for v in values.tolist():
            if np.isnan(v):
                groups.append(cur)
                cur = []
            else:
                cur.append(v)
        if cur:
            groups.append(cur)
        nodes = np.nonzero(modes == 6)[0]
        return {int(n): np.array(gv) for n, gv in zip(nodes, groups)}

    @staticmethod
    def _post(out, kind):
        if kind == 0:
            return out
        if kind == 2:
            return 1.0 / (1.0 + np.exp(-out))
        if kind in (1, 3):
            keep = np.ones_like(out, bool) if kind == 1 else out != 0
            e = np.where(keep, np.exp(out - out.max(axis=1, keepdims=True)), 0.0)
            return e / np.maximum(e.sum(axis=1, keepdims=True), 1e-300)
        raise ExecutionError(f"TreeEnsemble post_transform {kind} (PROBIT) is not supported")
