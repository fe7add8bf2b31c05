"""Built-in plugins for string and token ops: StringNormalizer, StringConcat, StringSplit, RegexFullMatch,
TfIdfVectorizer. String tensors are numpy object arrays of Python str, as the runtime passes them."""
import re

import numpy as np

from native.plugins import Plugin, register_plugin


def _str(a):
    """object array of str -> numpy unicode array (for the vectorised np.strings functions)."""
    a = np.asarray(a, dtype=object)
    return a.astype(str) if a.size else np.zeros(a.shape, "U1")


def _obj(a):
    return np.asarray(a, dtype=object) if np.asarray(a).size else np.empty(np.shape(a), dtype=object)


@register_plugin
class StringNormalizerPlugin(Plugin):
    """Drops stopwords (case-insensitively unless is_case_sensitive) from a [C] or [1, C] tensor, then
    changes case (LOWER / UPPER / NONE). An all-dropped input gives [""] ([[""]] for [1, C])."""

    name = "StringNormalizer"

    def enqueue(self, inputs, fields):
        x = _str(inputs[0])
        flat = x.reshape(-1)
        stop = fields.get("stopwords") or []
        if isinstance(stop, str):
            stop = [stop]
        if stop:
            sensitive = int(fields.get("is_case_sensitive", 0))
            key = flat if sensitive else np.strings.lower(flat)
            words = np.array(stop, dtype=str) if sensitive else np.strings.lower(np.array(stop, dtype=str))
            flat = flat[~np.isin(key, words)]
        action = fields.get("case_change_action", "NONE")
        if action == "LOWER":
            flat = np.strings.lower(flat)
        elif action == "UPPER":
            flat = np.strings.upper(flat)
        if flat.size == 0:
            flat = np.array([""])
        out = flat.reshape(1, -1) if x.ndim == 2 else flat
        return [_obj(out.astype(object))]


@register_plugin
class StringConcatPlugin(Plugin):
    """Elementwise concatenation with broadcasting."""

    name = "StringConcat"

    def enqueue(self, inputs, fields):
        a, b = np.broadcast_arrays(_str(inputs[0]), _str(inputs[1]))
        return [_obj(np.strings.add(a, b).astype(object))]


@register_plugin
class StringSplitPlugin(Plugin):
    """Splits each string on `delimiter` (whitespace runs when unset or empty), at most `maxsplit` times;
    outputs the pieces padded with "" to the longest split (one extra rank) and the piece counts."""

    name = "StringSplit"

    def enqueue(self, inputs, fields):
        x = np.asarray(inputs[0], dtype=object)
        delim = fields.get("delimiter") or None
        maxsplit = fields.get("maxsplit")
        maxsplit = -1 if maxsplit is None else int(maxsplit)
        flat = x.reshape(-1)
        parts = np.char.split(flat.astype(str), delim, maxsplit) if flat.size else np.empty(0, object)
        counts = np.array([len(p) for p in parts], np.int64)
        width = int(counts.max()) if counts.size else 0
        out = np.full((flat.size, width), "", dtype=object)
        if flat.size:
            rows = np.repeat(np.arange(flat.size), counts)
            cols = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
            out[rows, cols] = np.concatenate([np.array(p, dtype=object) for p in parts]) if counts.sum() else []
        return [out.reshape(x.shape + (width,)), counts.reshape(x.shape)]


@register_plugin
class RegexFullMatchPlugin(Plugin):
    """True where the whole string matches `pattern` (RE2 syntax, run with Python's re, which agrees on the
    common subset)."""

    name = "RegexFullMatch"

    def enqueue(self, inputs, fields):
        pattern = re.compile(fields["pattern"])
        x = np.asarray(inputs[0], dtype=object)
        match = np.frompyfunc(lambda s: pattern.fullmatch(s) is not None, 1, 1)
        return [match(x).astype(bool) if x.size else np.zeros(x.shape, bool)]


@register_plugin
class TfIdfVectorizerPlugin(Plugin):
    """Counts the pool's n-grams (lengths min..max_gram_length, gaps 0..max_skip_count) in each row of a
    [C] or [N, C] int or string tensor; TF counts, IDF clips to 1 then weighs, TFIDF weighs the counts."""

    name = "TfIdfVectorizer"

    def enqueue(self, inputs, fields):
        x = np.asarray(inputs[0])
        one_d = x.ndim == 1
        rows = x.reshape(1, -1) if one_d else x
        pool = fields.get("pool_int64s")
        if pool is None or len(pool) == 0:
            pool = list(fields.get("pool_strings") or [])
            vocab = {s: i for i, s in enumerate(dict.fromkeys(pool))}
            pool = np.array([vocab[s] for s in pool], np.int64)
            lookup = np.frompyfunc(lambda s: vocab.get(s, -1), 1, 1)
            rows = lookup(rows.astype(object)).astype(np.int64) if rows.size else rows.astype(np.int64)
        pool = np.asarray(pool, np.int64)
        starts = list(np.asarray(fields.get("ngram_counts"), np.int64)) + [len(pool)]
        indexes = np.asarray(fields.get("ngram_indexes"), np.int64)
        lo, hi = int(fields.get("min_gram_length", 1)), int(fields.get("max_gram_length", 1))
        max_skip = int(fields.get("max_skip_count", 0))
        n_out = int(indexes.max()) + 1 if indexes.size else 0
        counts = np.zeros((rows.shape[0], len(indexes)), np.float64)
        gram_id = 0
        for n in range(1, len(starts)):
            grams = pool[starts[n - 1]:starts[n]].reshape(-1, n)
            if lo <= n <= hi and grams.size:
                for skip in range(max_skip + 1 if n > 1 else 1):
                    span = (n - 1) * (skip + 1)
                    if span >= rows.shape[1]:
                        break
                    pos = np.arange(rows.shape[1] - span)[:, None] + np.arange(n)[None, :] * (skip + 1)
                    windows = rows[:, pos]  # (N, W, n)
                    hit = np.all(windows[:, :, None, :] == grams[None, None, :, :], axis=-1)  # (N, W, G)
                    counts[:, gram_id:gram_id + len(grams)] += hit.sum(axis=1)
            gram_id += len(grams)
        mode = fields.get("mode", "TF")
        weights = fields.get("weights")
        weights = np.ones(len(indexes)) if weights is None or len(weights) == 0 else np.asarray(weights, np.float64)
        if mode == "IDF":
            counts = np.minimum(counts, 1) * weights
        elif mode == "TFIDF":
            counts = counts * weights
        out = np.zeros((rows.shape[0], n_out), np.float32)
        np.add.at(out, (slice(None), indexes), counts.astype(np.float32))
        return [out[0] if one_d else out]
