"""A CTranslate2 model file (`model.bin`, binary version 6) read without CTranslate2: the file
is a list of named tensors (name, shape, type, bytes) and a list of aliases. Used by
convert_whisper.py (Stead's ONNX graphs) and peer_whisper.py (whisper.cpp's ggml file).
"""

import struct
import sys

import numpy as np

_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}


def read_ct2(path):
    """The tensors of a CTranslate2 model file (binary version 6), by name, aliases resolved."""
    data = open(path, "rb").read()
    at = 0

    def take(fmt):
        nonlocal at
        (value,) = struct.unpack_from(fmt, data, at)
        at += struct.calcsize(fmt)
        return value

    def string():
        nonlocal at
        n = take("<H")
        value = data[at : at + n - 1].decode()
        at += n
        return value

    version = take("<I")
    if version != 6:
        sys.exit(f"{path}: CTranslate2 binary version {version}, expected 6")
    spec = string()
    if spec != "WhisperSpec":
        sys.exit(f"{path}: a {spec}, not a WhisperSpec")
    take("<I")  # the spec's revision
    tensors = {}
    for _ in range(take("<I")):
        name = string()
        dims = [take("<I") for _ in range(take("<B"))]
        dtype = _DTYPES[take("<B")]
        size = take("<I")
        tensors[name] = np.frombuffer(data, dtype=dtype, count=size // np.dtype(dtype).itemsize, offset=at).reshape(dims)
        at += size
    for _ in range(take("<I")):
        alias, target = string(), string()
        tensors[alias] = tensors[target]
    return tensors
