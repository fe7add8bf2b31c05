"""Built-in plugin ImageDecoder for the uncompressed formats: BMP (24/32-bit), binary PNM (P5/P6) and
uncompressed 8-bit TIFF. Compressed formats (JPEG, JPEG 2000, PNG, WebP) need a codec library we do not
ship; they fail with a message that says so."""
import struct

import numpy as np

from native.errors import ExecutionError
from native.plugins import Plugin, register_plugin


def _bmp(b):
    offset, = struct.unpack_from("<I", b, 10)
    width, height, _, bpp, compression = struct.unpack_from("<iiHHI", b, 18)
    if compression not in (0, 3) or bpp not in (24, 32):
        raise ExecutionError(f"ImageDecoder: BMP with {bpp} bits per pixel / compression {compression} "
                             f"is not supported")
    ch = bpp // 8
    stride = (width * ch + 3) // 4 * 4
    rows = np.frombuffer(b, np.uint8, stride * abs(height), offset).reshape(abs(height), stride)
    img = rows[:, : width * ch].reshape(abs(height), width, ch)[:, :, 2::-1]  # BGR(A) -> RGB
    return img[::-1] if height > 0 else img  # positive height: stored bottom-up


def _pnm(b):
    tokens, pos = [], 0
    while len(tokens) < 4:
        while b[pos:pos + 1].isspace():
            pos += 1
        if b[pos:pos + 1] == b"#":
            pos = b.index(b"\n", pos)
            continue
        end = pos
        while not b[end:end + 1].isspace():
            end += 1
        tokens.append(b[pos:end])
        pos = end
    magic, w, h, maxval = tokens[0], int(tokens[1]), int(tokens[2]), int(tokens[3])
    if magic not in (b"P5", b"P6") or maxval > 255:
        raise ExecutionError(f"ImageDecoder: PNM variant {magic!r} (maxval {maxval}) is not supported")
    ch = 3 if magic == b"P6" else 1
    img = np.frombuffer(b, np.uint8, w * h * ch, pos + 1).reshape(h, w, ch)
    return np.repeat(img, 3, axis=2) if ch == 1 else img


def _tiff(b):
    end = "<" if b[:2] == b"II" else ">"
    ifd, = struct.unpack_from(end + "I", b, 4)
    count, = struct.unpack_from(end + "H", b, ifd)
    tags = {}
    sizes = {1: 1, 3: 2, 4: 4}
    for i in range(count):
        tag, typ, n, _ = struct.unpack_from(end + "HHII", b, ifd + 2 + 12 * i)
        fmt = {1: "B", 3: "H", 4: "I"}.get(typ)
        if fmt is None:
            continue
        at = ifd + 2 + 12 * i + 8
        if sizes[typ] * n > 4:
            at, = struct.unpack_from(end + "I", b, at)
        tags[tag] = struct.unpack_from(end + fmt * n, b, at)
    width, height = tags[256][0], tags[257][0]
    spp = tags.get(277, (1,))[0]
    if tags.get(259, (1,))[0] != 1 or any(v != 8 for v in tags.get(258, (8,))):
        raise ExecutionError("ImageDecoder: only uncompressed 8-bit TIFF is supported")
    data = b"".join(b[o:o + n] for o, n in zip(tags[273], tags[279]))
    img = np.frombuffer(data, np.uint8, width * height * spp).reshape(height, width, spp)
    return np.repeat(img, 3, axis=2) if spp == 1 else img[:, :, :3]


@register_plugin
class ImageDecoderPlugin(Plugin):
    """Decodes an encoded image (uint8 bytes) to HWC uint8 in pixel_format RGB, BGR or Grayscale."""

    name = "ImageDecoder"

    def enqueue(self, inputs, fields):
        b = np.asarray(inputs[0], np.uint8).tobytes()
        if b[:2] == b"BM":
            rgb = _bmp(b)
        elif b[:2] in (b"P5", b"P6"):
            rgb = _pnm(b)
        elif b[:4] in (b"II*\x00", b"MM\x00*"):
            rgb = _tiff(b)
        else:
            kind = {b"\xff\xd8": "JPEG", b"\x89P": "PNG", b"RI": "WebP", b"\x00\x00": "JPEG 2000"}.get(b[:2], "unknown")
            raise ExecutionError(f"ImageDecoder: {kind} images need a codec library; only BMP, PNM and "
                                 f"uncompressed TIFF are decoded")
        fmt = fields.get("pixel_format", "RGB")
        if fmt == "BGR":
            return [np.ascontiguousarray(rgb[:, :, ::-1])]
        if fmt == "Grayscale":
            y = rgb.astype(np.float64) @ np.array([0.299, 0.587, 0.114])
            return [np.clip(np.round(y), 0, 255).astype(np.uint8)[:, :, None]]
        return [np.ascontiguousarray(rgb)]
